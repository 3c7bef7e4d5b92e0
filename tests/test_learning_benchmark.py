"""Smoke tests of the learning benchmark (benchmarks/learning.py and benchmarks/credit_lab).

The full benchmark is a benchmark, not a test; these keep it working in a few seconds: the
tasks' stated optimum, exact evaluation against sampling and autograd, the single-turn
control (identical advantages ⇒ identical curves), learning on the refinement task, the
mechanism by which discounting hurts outcome-only credit, and the command's outputs.
"""

from __future__ import annotations

import dataclasses
import math

import learning
import numpy as np
import pytest
import torch
from credit_lab.control import compare_advantages
from credit_lab.exact import evaluate, flows, return_gradient, true_advantages
from credit_lab.methods import DEFAULT_METHODS, Method
from credit_lab.policy import TabularPolicy, rollout
from credit_lab.report import summarize
from credit_lab.tasks import TASKS, detour, refine, refine_pm1, single_turn, submit
from credit_lab.train import TrainConfig, train, turn_advantages

from verifiers_stepwise import get_estimator
from verifiers_stepwise.estimators.registry import UnknownEstimator

SMOKE = TrainConfig(steps=12, groups=4, group_size=8, lr=0.1, seed=0)  # 384 episodes


@pytest.fixture(autouse=True)
def one_thread():
    """The tensors are tiny: intra-op threads only contend (badly, on a busy machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def optimal_probs(task) -> torch.Tensor:
    """The stated optimum of the refinement tasks: flip the lowest wrong bit, else keep."""
    targets = torch.arange(task.n_prompts)[:, None]
    drafts = torch.arange(task.n_states)[None, :]
    wrong = targets ^ drafts
    lowest = torch.where(wrong == 0, task.n_actions - 1, (wrong & -wrong).float().log2().long())
    return torch.nn.functional.one_hot(lowest, task.n_actions).double()


@pytest.mark.parametrize("reward", ["every_turn", "outcome"])
def test_refine_optimum_is_as_documented(reward):
    task = refine(n_bits=4, turns=6, reward=reward)
    best = evaluate(task, optimal_probs(task))
    assert best.success == 1.0
    if reward == "every_turn":
        distance = torch.tensor([v.bit_count() for v in range(16)])
        returns = [sum(min(4, 4 - int(d) + t) / 4 for t in range(1, 7)) for d in distance]
        assert best.expected_return == pytest.approx(np.mean(returns), abs=1e-12)
    # Nothing does better, and the uniform start is far from it.
    assert evaluate(task, torch.full((16, 16, 5), 0.2, dtype=torch.float64)).success < 0.2


def test_single_turn_optimum_and_sizes():
    task = single_turn(n_bits=4)
    assert (task.turns, task.n_prompts, task.n_states, task.n_actions) == (1, 16, 17, 16)
    answer_target = torch.eye(16, dtype=torch.float64)[:, None, :].expand(16, 17, 16)
    assert evaluate(task, answer_target).success == 1.0
    assert evaluate(task, torch.full((16, 17, 16), 1 / 16, dtype=torch.float64)).success == pytest.approx(1 / 16)


def test_refine_rejects_bad_sizes():
    with pytest.raises(ValueError, match="turns >= n_bits"):
        refine(n_bits=4, turns=3)
    with pytest.raises(ValueError, match="reward must be"):
        refine(reward="final")


@pytest.mark.parametrize("name", list(TASKS))
def test_exact_success_matches_sampled_rollouts(name):
    task = TASKS[name]()
    policy = TabularPolicy(task)
    with torch.no_grad():
        policy.logits.copy_(torch.randn(policy.logits.shape, generator=torch.Generator().manual_seed(1)))
    exact = evaluate(task, policy.probs())
    prompts = torch.arange(task.n_prompts).repeat(1000)
    batch = rollout(task, policy, prompts, torch.Generator().manual_seed(2))
    n = prompts.numel()
    returns = batch.rewards.sum(1)
    assert batch.solved.double().mean().item() == pytest.approx(exact.success, abs=4 * math.sqrt(0.25 / n))
    assert returns.mean().item() == pytest.approx(exact.expected_return, abs=4 * returns.std().item() / math.sqrt(n))


@pytest.mark.parametrize("name", list(TASKS))
def test_return_gradient_is_the_autograd_gradient(name):
    task = TASKS[name]()
    logits = torch.randn(task.n_observations, task.n_actions, dtype=torch.float64, requires_grad=True)
    probs = torch.softmax(logits, -1).reshape(task.n_prompts, task.n_states, task.n_actions)
    (autograd,) = torch.autograd.grad((flows(task, probs)[1] * task.reward).sum(), logits)
    p = probs.detach()
    assert torch.allclose(return_gradient(task, p, true_advantages(task, p)), autograd, atol=1e-14)


def optimal_returns(task) -> torch.Tensor:
    """(P,) the best expected return from each prompt's start, by dynamic programming (max over a)."""
    prompts = torch.arange(task.n_prompts)[:, None, None]
    nxt = task.next_state[None]
    value = torch.zeros(task.n_prompts, task.n_states, dtype=torch.float64)
    going = (~task.terminal).double()
    for t in reversed(range(task.turns)):
        value = (task.reward[t][prompts, nxt] + going[prompts, nxt] * value[prompts, nxt]).amax(-1)
    return value[torch.arange(task.n_prompts), task.start]


def test_new_tasks_optima_are_as_documented():
    pm1 = refine_pm1()
    distance = torch.tensor([bin(p).count("1") for p in range(pm1.n_prompts)], dtype=torch.float64)
    expected = torch.where(distance == 0, 1.0, 2.0 - distance)  # d − 1 wrong attempts, then right
    assert torch.allclose(optimal_returns(pm1), expected)
    assert torch.allclose(optimal_returns(submit()), torch.ones(8, dtype=torch.float64))
    assert torch.allclose(optimal_returns(detour()), torch.full((2,), 4.4, dtype=torch.float64))
    # an always-right refine_pm1 rollout stops: lengths vary
    policy = TabularPolicy(pm1)
    batch = rollout(pm1, policy, torch.arange(16).repeat(8), torch.Generator().manual_seed(0))
    assert batch.lengths.min() < pm1.turns and (batch.rewards[~batch.played] == 0).all()


@pytest.mark.slow
def test_single_turn_control_gives_identical_curves():
    task = single_turn()
    reference, *others = DEFAULT_METHODS
    base = train(task, reference.build(), SMOKE)
    assert base.success[-1] > base.success[0]  # it learns at all
    mean_only = Method("grpo", {"scale": "none"})
    base_mean_only = train(task, mean_only.build(), SMOKE)
    for method in others:
        # mean-only methods are compared with mean-only grpo (Dr. GRPO), std-scaled with grpo
        ref, ref_run = (mean_only, base_mean_only) if method.config.get("scale") == "none" else (reference, base)
        agreement = compare_advantages(task, ref.build(), method.build(), SMOKE, batches=4)
        if method.config.get("baseline") == "leave_one_out":
            # RLOO scales deviations by n/(n − 1): same direction, different size.
            assert not agreement.identical and agreement.scale == pytest.approx(8 / 7, rel=1e-12)
            continue
        assert agreement.identical, method.label
        run = train(task, method.build(), SMOKE)
        np.testing.assert_array_equal(run.success, ref_run.success)


def test_control_check_fails_when_identical_advantages_give_different_curves():
    task = single_turn()
    grpo, stepwise = Method("grpo"), Method("stepwise", {"scale": "std"})
    config = dataclasses.replace(SMOKE, steps=2)
    run = train(task, grpo.build(), config)
    tampered = dataclasses.replace(run, success=run.success + 1e-9)
    lines = learning.control_check(task, {"grpo": [run], stepwise.label: [run]}, [grpo, stepwise], config)
    assert "curves identical" in lines[0]
    with pytest.raises(AssertionError, match="learning curve differs"):
        learning.control_check(task, {"grpo": [run], stepwise.label: [tampered]}, [grpo, stepwise], config)


def test_per_turn_credit_learns_the_refinement_task():
    task = refine()
    run = train(task, get_estimator("stepwise", gamma=0.4), SMOKE)
    assert run.success[-1] > run.success[0] + 0.05
    assert run.expected_return[-1] > run.expected_return[0]
    signal = run.signal.summary()
    assert signal.grad_cos > 0  # the updates point uphill on average


def test_pooled_discounting_flips_early_credit_on_outcome_rewards():
    """Where discounting hurts (docs/benchmarks.md): outcome-only rewards, γ = 0.4, pooled baseline.

    A successful episode's first-turn return γ^(T−1) is below the pooled mean once a few
    episodes of the group succeed, so its decisive first turn is pushed down; the per_turn
    baseline compares it only with other first turns and keeps the sign.
    """
    task = refine(reward="outcome")
    rewards = torch.zeros(8, task.turns, dtype=torch.float64)
    rewards[:4, -1] = 1.0  # half the group solved it
    pooled = turn_advantages(get_estimator("stepwise", gamma=0.4, baseline="pooled"), rewards, 8)
    per_turn = turn_advantages(get_estimator("stepwise", gamma=0.4, baseline="per_turn"), rewards, 8)
    gentle = turn_advantages(get_estimator("stepwise", gamma=0.8, baseline="pooled"), rewards, 8)
    assert pooled[0, 0] < 0 and pooled[0, -1] > 0
    assert per_turn[0, 0] > 0 and gentle[0, 0] > 0
    assert (pooled[0] > pooled[4]).all()  # still ordered within each turn, just shifted
    one = torch.zeros(8, task.turns, dtype=torch.float64)
    one[0, -1] = 1.0  # a single success is enough to flip its first two turns at γ = 0.4
    lone = turn_advantages(get_estimator("stepwise", gamma=0.4, baseline="pooled"), one, 8)
    assert lone[0, 0] < 0 and lone[0, 1] < 0 and lone[0, 2] > 0


def test_method_specs_parse_and_build():
    method = Method.parse("stepwise:gamma=0.8,aggregation=max")
    assert method.config == {"gamma": 0.8, "aggregation": "max"}
    assert Method.parse(method.label) == method
    assert method.short == "stepwise γ=0.8 max"
    assert method.build().config.gamma == 0.8
    with pytest.raises(ValueError, match="expected key=value"):
        Method.parse("stepwise:gamma")
    with pytest.raises(UnknownEstimator, match="installed"):
        Method.parse("nope").build()


def test_command_writes_table_json_and_plot(tmp_path, capsys):
    out = tmp_path / "learning"
    argv = [
        "--out",
        str(out),
        "--seeds",
        "1",
        "--steps",
        "3",
        "--tasks",
        "refine",
        "single_turn",
        "--method",
        "grpo",
        "--method",
        "stepwise:gamma=0.4,scale=std",
    ]
    assert learning.main(argv) == 0
    table = (out / "results.md").read_text()
    assert "## refine" in table and "## single_turn" in table
    assert "| `grpo` |" in table and "| `stepwise:gamma=0.4,scale=std` |" in table
    assert "advantages identical to `grpo`; curves identical" in table
    assert (out / "learning_curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "results.md" in capsys.readouterr().out


def test_command_rejects_duplicate_methods(tmp_path):
    with pytest.raises(SystemExit):
        learning.main(["--out", str(tmp_path), "--method", "grpo", "--method", "grpo"])


def test_summary_of_a_run_that_starts_at_the_target():
    run = train(single_turn(), get_estimator("grpo"), dataclasses.replace(SMOKE, steps=2))
    row = summarize("grpo", [run], target=0.0)  # met before the first update: no learning phase
    assert row.episodes_to_target == (0.0,) and row.reached == 1
    assert math.isnan(row.signal.grad_cos) and row.signal.wrong_sign_by_turn == ()
    assert row.as_dict()["signal"]["grad_cos"] is None

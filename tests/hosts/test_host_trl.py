"""The TRL host (TRL 1.16.0): real verifiers episodes, the trainer's own model, per-token credit.

Fast tests drive real episodes of ``stepwise-refine`` through verifiers' train client against
the token endpoint with a scripted generator; the slow ones train a tiny random Llama built
offline (``tiny_model``, over the ``tokenizer`` fixture's byte-level BPE) with TRL's real
``GRPOTrainer`` loop.
"""

from __future__ import annotations

import copy
import json
import math
import sys
import urllib.error
import urllib.request

import pytest
import torch
import verifiers.v1 as vf
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from trl import GRPOConfig

from verifiers_stepwise.errors import HostMismatch
from verifiers_stepwise.estimators.registry import get_estimator
from verifiers_stepwise.hosts.token_endpoint import GenerateRequest, Generation, parse_request
from verifiers_stepwise.hosts.trl.inference import submit
from verifiers_stepwise.hosts.trl.inference.endpoint import BatchingTokenEndpoint
from verifiers_stepwise.hosts.trl.inference.renderer import END_OF_TURN, TurnFormatRenderer, renderer_config
from verifiers_stepwise.hosts.trl.inference.sampling import ModelSampler
from verifiers_stepwise.hosts.trl.rollout import score_groups
from verifiers_stepwise.hosts.trl.trainer import StepwiseGRPOTrainer, _group_tasks
from verifiers_stepwise.testing.episodes import run_groups
from verifiers_stepwise.traces.credit import score_group
from verifiers_stepwise.traces.turns import read_turns

KEY_VAR = "STEPWISE_TRL_TEST_KEY"
REFINE = {"taskset": {"id": "stepwise-refine"}, "max_turns": 3, "threshold": math.inf, "turn_cost": 0.0}
VOWELS = """
import verifiers.v1 as vf

__all__ = ["VowelTaskset"]


class VowelTask(vf.Task[vf.TaskData]):
    @vf.reward
    async def vowels(self, trace: vf.Trace) -> float:
        reply = trace.last_reply or ""
        return sum(c in "aeiou" for c in reply) / max(1, len(reply))


class VowelTaskset(vf.Taskset[VowelTask]):
    def load(self):
        yield VowelTask(vf.TaskData(id="vowels-0", prompt="Say something with many vowels."))
"""


@pytest.fixture(scope="module")
def vowel_taskset(tmp_path_factory):
    """A one-task taskset whose reward varies with any reply, so a random model's groups have signal."""
    root = tmp_path_factory.mktemp("vowels")
    (root / "trl_vowels.py").write_text(VOWELS)
    sys.path.insert(0, str(root))
    try:
        yield "trl-vowels"
    finally:
        sys.path.remove(str(root))
        sys.modules.pop("trl_vowels", None)


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv(KEY_VAR, "local")
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def tokenizer():
    """A byte-level BPE (any text encodes, every id decodes) trained on a few lines, with Gemma's
    turn tokens as special tokens so ``TurnFormatRenderer`` accepts it."""
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=["<pad>", "<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = [
        "Compute 17 * 23. End your reply with the number.",
        "Your answer scored 0.50; 1.00 counts as solved. Check your work and give an improved answer.",
        "user\nmodel\n The answer is 391. 0123456789 + - * / = ( )",
    ]
    core.train_from_iterator(corpus, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="<pad>",
        bos_token="<bos>",
        eos_token="<eos>",
        additional_special_tokens=["<start_of_turn>", "<end_of_turn>"],
    )


def tiny_model(tokenizer, **config):
    """A randomly initialized 2-layer Llama for ``tokenizer``; ``config`` overrides ``LlamaConfig``
    fields (``attention_bias=True``)."""
    torch.manual_seed(0)
    llama = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **config,
    )
    return LlamaForCausalLM(llama)


@pytest.fixture(scope="module")
def tokenizer_dir(tokenizer, tmp_path_factory):
    path = tmp_path_factory.mktemp("tokenizer")
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture
def model_dir(tokenizer, tmp_path):
    """The tiny model and its tokenizer saved where ``--model`` can load them."""
    path = tmp_path / "tiny"
    tiny_model(tokenizer).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


class Scripted:
    """A generator replying with fixed texts in turn, each closed by ``end`` (default <end_of_turn>),
    logprob -0.5 per token."""

    def __init__(self, tokenizer, replies, cut_at=None, end=END_OF_TURN):
        self.replies = [tokenizer.encode(r, add_special_tokens=False) for r in replies]
        self.end = tokenizer.convert_tokens_to_ids(end) if end.startswith("<") else tokenizer.encode(end)[-1]
        self.cut_at = cut_at
        self.requests: list[GenerateRequest] = []

    def __call__(self, requests):
        out = []
        for request in requests:
            tokens = self.replies[len(self.requests) % len(self.replies)] + [self.end]
            self.requests.append(request)
            limit = request.max_tokens or len(tokens)
            finish = "stop" if len(tokens) <= limit else "length"
            out.append(Generation(tokens[:limit], [-0.5] * min(limit, len(tokens)), finish))
        return out


def post(endpoint, body) -> tuple[int, str]:
    """POST ``body`` to the endpoint's ``/inference/v1/generate``: the HTTP status and the answer."""
    url = endpoint.base_url.removesuffix("/v1") + "/inference/v1/generate"
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def _episodes(tokenizer_dir, generate, env=REFINE, rollouts=2, max_tokens=None, format="turns"):
    """Run on the host's own rollout loop (see ``inference.submit``), as training does."""
    with BatchingTokenEndpoint(generate) as endpoint:
        client = vf.TrainClientConfig(
            base_url=endpoint.base_url,
            api_key_var=KEY_VAR,
            renderer=renderer_config(format),
            renderer_model_name=tokenizer_dir,
        )
        return submit(
            run_groups(
                env,
                client,
                model="policy",
                rollouts=rollouts,
                limit=1,
                sampling=vf.SamplingConfig(max_tokens=max_tokens),
            )
        ).result()


# -- the endpoint and the renderer, through verifiers' real train client -----------------------


def test_sampled_tokens_reach_the_trace_verbatim_and_feedback_is_not_sampled(tokenizer, tokenizer_dir):
    generate = Scripted(tokenizer, ["About 400.", "It is 390.", "391"])
    (group,) = _episodes(tokenizer_dir, generate, rollouts=1)
    (trace,) = group[0].traces
    assert trace.ok and len(trace.branches) == 1
    branch = trace.branches[0]
    sampled = [t for t, m in zip(branch.token_ids, branch.sampled_mask) if m]
    assert sampled == [t for r in generate.replies for t in r + [generate.end]]
    assert [lp for lp, m in zip(branch.logprobs, branch.sampled_mask) if m] == [-0.5] * len(sampled)
    # every later prompt extends the previous prompt and reply token for token
    for earlier, later in zip(generate.requests, generate.requests[1:]):
        assert later.prompt_ids[: len(earlier.prompt_ids)] == earlier.prompt_ids
    text = tokenizer.decode(branch.token_ids)
    assert text.count("Your answer scored") == 2 and text.startswith("<bos><start_of_turn>user\nCompute")
    assert trace.info["turn_scores"] == pytest.approx([1 - 9 / 391, 1 - 1 / 391, 1.0])  # refine records scores
    assert read_turns(trace).rewards == pytest.approx([1 - 9 / 391, 8 / 391, 1 / 391])


def test_a_reply_cut_at_max_tokens_is_closed_without_forking_the_trace(tokenizer, tokenizer_dir):
    generate = Scripted(tokenizer, ["a long reply that will be cut somewhere"])
    (group,) = _episodes(tokenizer_dir, generate, rollouts=1, max_tokens=3)
    (trace,) = group[0].traces
    assert len(trace.branches) == 1 and len(read_turns(trace).rewards) == 3
    first, second = generate.requests[:2]
    reply = generate.replies[0][:3]
    assert second.prompt_ids[: len(first.prompt_ids) + 4] == first.prompt_ids + reply + [generate.end]


def test_the_renderer_needs_the_turn_tokens():
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    bare = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"a": 0, "<unk>": 1}, "<unk>")))
    with pytest.raises(ValueError, match="has no token"):
        TurnFormatRenderer(bare)


def test_the_renderer_puts_a_system_prompt_in_the_first_user_turn(tokenizer):
    renderer = TurnFormatRenderer(tokenizer)
    ids = renderer.render_ids(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], add_generation_prompt=True
    )
    assert tokenizer.decode(ids) == "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n"
    assert renderer.get_stop_token_ids()[0] == tokenizer.convert_tokens_to_ids(END_OF_TURN)


def test_a_failing_generator_answers_500_and_a_bad_request_400():
    def broken(requests):
        raise RuntimeError("out of memory")

    with BatchingTokenEndpoint(broken) as endpoint:
        for body, status, text in [
            ({"token_ids": [1, 2], "sampling_params": {"max_tokens": 4}}, 500, "out of memory"),
            ({"token_ids": [], "sampling_params": {}}, 400, "token_ids"),
        ]:
            answer_status, answer = post(endpoint, body)
            assert answer_status == status and text in answer


@pytest.mark.parametrize(
    "params, field",
    [({"max_tokens": 0}, "max_tokens"), ({"temperature": -1}, "temperature"), ({"top_p": 0}, "top_p")],
)
def test_bad_sampling_params_are_named(params, field):
    with pytest.raises(ValueError, match=field):
        parse_request({"token_ids": [1], "sampling_params": params})


def test_rows_must_come_in_whole_groups():
    assert _group_tasks([4, 4, 1, 1], 2) == [4, 1]
    with pytest.raises(HostMismatch, match="not groups of 2 rows of one task"):
        _group_tasks([4, 1, 1, 4], 2)
    with pytest.raises(HostMismatch, match="not groups of 3 rows"):
        _group_tasks([4, 4], 3)


def test_an_errored_episode_gets_no_reward_and_no_advantage(tokenizer, tokenizer_dir):
    generate = Scripted(tokenizer, ["12", "13"])
    calls = 0

    def second_episode_fails_on_its_second_turn(requests):
        nonlocal calls
        calls += len(requests)
        if any(len(r.prompt_ids) > 30 for r in requests) and calls > 3:
            raise RuntimeError("engine died")
        return generate(requests)

    (group,) = _episodes(tokenizer_dir, second_episode_fails_on_its_second_turn, rollouts=2)
    samples = score_groups([group], get_estimator("stepwise"), tokenizer.pad_token_id)
    failed = [s for s in samples if s.credit.excluded]
    assert failed, "the fault should have ended an episode"
    for sample in failed:
        assert sample.reward is None and sample.credit.advantages == []
        assert set(sample.advantages) == {0.0}
        assert "engine died" in sample.credit.excluded or "errored" in sample.credit.excluded


def test_gigpo_gets_the_envs_anchor_states_through_the_host(tokenizer, tokenizer_dir, monkeypatch):
    """An env that names its states (here: the turn index, shared by every rollout) reaches
    ``gigpo`` through the host's scoring: wrong-then-right and right-at-once have equal episode
    returns (grpo: 0 everywhere) but different returns from the shared first state. A wrong try
    pays 0 here (``incorrect_reward``; stepwise-sums' default charges it -1, which would make the
    episode returns differ)."""
    from stepwise_sums.sums import SumsEnv

    monkeypatch.setattr(SumsEnv, "turn_state", lambda self, task, index, trace, message: index)
    env = SUMS | {"incorrect_reward": 0.0}
    answer = list(vf.load_environment(vf.resolve_env_config(env)).taskset)[0].data.answer
    generate = Scripted(tokenizer, [f" {answer + 1}", f" {answer}", f" {answer}"], end="\n")
    (group,) = _episodes(tokenizer_dir, generate, env=env, rollouts=2, format="text")
    gigpo = score_groups([group], get_estimator("gigpo"), tokenizer.pad_token_id)
    assert sorted(s.credit.rewards for s in gigpo) == [[0.0, 1.0], [1.0]]
    assert {
        a for s in score_groups([group], get_estimator("grpo"), tokenizer.pad_token_id) for a in s.credit.advantages
    } == {0.0}
    first = {len(s.credit.rewards): s.credit.advantages[0] for s in gigpo}
    assert first[1] > 0 > first[2]  # from the shared start, answering at once scores higher


# -- training with TRL's real loop -------------------------------------------------------------


def _trainer(
    tokenizer, tmp_path, env=REFINE, estimator="stepwise", options=None, generate=None, format="turns", **args
):
    settings = dict(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        num_generations=4,
        max_steps=2,
        max_completion_length=6,
        learning_rate=1e-2,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        seed=0,
    )
    config = GRPOConfig(**(settings | args))
    return StepwiseGRPOTrainer(
        tiny_model(tokenizer),
        env,
        args=config,
        processing_class=tokenizer,
        estimator=estimator,
        options=options,
        format=format,
        generate=generate,
    )


def test_the_train_clients_renderer_is_built_with_the_trainer_not_in_step_1(tokenizer, tmp_path):
    """Was: the train client loaded the tokenizer into verifiers' renderer pool in front of the
    first turn of step 1 (3-4 s for Gemma's 262k tokens; step 1 took 8.5-9.3 s against TRL's
    3.4-4.7 s). The trainer now builds it while TRL wraps the model, where the client finds it."""
    from verifiers.v1.clients.train import ElasticRendererPool

    trainer = _trainer(tokenizer, tmp_path)

    def renderers() -> list:  # verifiers' process-wide pool, under any key naming this tokenizer
        name = trainer.inference._tokenizer_dir.name
        return [r for key, built in ElasticRendererPool._renderers.items() if key[0] == name for r in built]

    try:
        trainer.inference._renderer_ready.result(timeout=60)
        (built,) = renderers()
        trainer.run_episodes(trainer.tasks[:1], 2)
        assert renderers() == [built]  # the episodes' client used it, and built no other
    finally:
        trainer.close()


@pytest.mark.slow
def test_two_steps_train_on_per_turn_credit_equal_to_score_group(tokenizer, tmp_path):
    trainer = _trainer(tokenizer, tmp_path)
    assert tokenizer.convert_tokens_to_ids(END_OF_TURN) in trainer.eos_token_ids  # a closed reply ended
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    trainer.train()
    assert trainer.state.global_step == 2
    changed = [name for name, p in trainer.model.named_parameters() if not torch.equal(p, before[name])]
    assert len(changed) == len(before)
    batch = trainer.last_batch
    assert len(batch.samples) == 4 and any(a != 0 for s in batch.samples for a in s.credit.advantages)
    for i, (episode, sample) in enumerate(zip(batch.episodes, batch.samples)):
        # the same traces, scored again from scratch, turn by turn
        (trace,) = episode.traces
        copy = episode.model_copy(deep=True)
        for node in copy.traces[0].nodes:
            node.advantages = None
        turns = read_turns(trace)
        assert len(turns.rewards) == 3
        row = batch.advantages[i, : len(sample.completion_ids)]
        mask = torch.tensor(sample.env_mask, dtype=torch.bool)
        assert torch.all(row[~mask] == 0), "env tokens carry no advantage"
        assert len(sample.credit.advantages) == 3
        start = len(sample.prompt_ids)
        offset = 0
        for node in trace.nodes:
            n = len(node.token_ids)
            lo = offset - start
            if lo >= 0 and node.sampled:
                turn = next(t for t, nodes in enumerate(turns.nodes) if trace.nodes.index(node) in nodes)
                values = row[lo : lo + n][torch.tensor(node.mask)]
                assert torch.allclose(values, torch.tensor(sample.credit.advantages[turn], dtype=torch.float32))
            offset += n
    # score_group on fresh copies of the group gives the same per-turn advantages
    copies = [e.model_copy(deep=True) for e in batch.episodes]
    expected = [c.advantages for c in score_group(copies, trainer.estimator).values()]
    assert [pytest.approx(a) for a in expected] == [s.credit.advantages for s in batch.samples]
    logged = trainer.state.log_history[0]
    for key in ("reward", "turn_rewards/mean", "turn_advantages/abs_mean", "turn_rewards/turn_2", "turns/mean"):
        assert key in logged


@pytest.mark.slow
def test_a_third_party_estimator_is_picked_by_its_registered_name(tokenizer, tmp_path, third_party_estimator):
    trainer = _trainer(tokenizer, tmp_path, estimator="last-turn-only", options={"bonus": 0.5}, max_steps=1)
    assert isinstance(trainer.estimator, third_party_estimator) and trainer.estimator.config.bonus == 0.5
    trainer.train()
    for sample in trainer.last_batch.samples:
        *earlier, last = sample.credit.advantages
        assert earlier == [0.0, 0.0] and last != 0.0


@pytest.mark.slow
def test_single_turn_episodes_reproduce_trls_own_grpo_advantages(tokenizer, tmp_path, vowel_taskset):
    env = {"id": "stepwise-refine", "taskset": {"id": vowel_taskset}, "max_turns": 1}
    trainer = _trainer(tokenizer, tmp_path, env, "grpo", {"scale": "none"}, scale_rewards="none", max_steps=1)
    trainer.train()
    batch = trainer.last_batch
    assert any(batch.trl_advantages != 0)
    for i, sample in enumerate(batch.samples):
        mask = torch.tensor(sample.env_mask, dtype=torch.bool)
        row = batch.advantages[i, : len(sample.completion_ids)]
        assert torch.allclose(row[mask], batch.trl_advantages[i].expand(int(mask.sum())), atol=1e-6)


@pytest.mark.slow
def test_a_model_call_fault_mid_episode_is_recorded_and_training_goes_on(tokenizer, tmp_path):
    from transformers import TrainerCallback

    def flaky(requests):
        # in the first step every second-turn call fails (the harness's retries too): a prompt
        # longer than the task's own holds a reply and feedback
        first = min(len(r.prompt_ids) for r in requests) if not prompt_len else prompt_len[0]
        prompt_len[:] = [first]
        if trainer.state.global_step > 0:
            return sampler(requests)
        answers = sampler([r for r in requests if len(r.prompt_ids) == first])
        fault = RuntimeError("injected engine fault")
        return [answers.pop(0) if len(r.prompt_ids) == first else fault for r in requests]

    class KeepBatches(TrainerCallback):
        def on_step_end(self, args, train_state, control, **kwargs):
            batches.append(trainer.last_batch)

    batches, prompt_len = [], []
    trainer = _trainer(tokenizer, tmp_path, generate=flaky)
    trainer.add_callback(KeepBatches())
    sampler = ModelSampler(lambda: trainer.model, tokenizer.pad_token_id)
    trainer.train()
    assert trainer.state.global_step == 2
    first, second = batches
    for episode, sample in zip(first.episodes, first.samples):
        (trace,) = episode.traces
        assert not trace.ok and any("injected engine fault" in error.message for error in trace.errors)
        assert sample.credit.excluded and sample.reward is None and sample.credit.advantages == []
        assert set(sample.advantages) == {0.0}
        assert len(sample.credit.rewards) == 1, "the turn earned before the fault stays on the trace"
    assert trainer.state.log_history[0]["episodes/errored"] == 1.0
    assert all(s.credit.excluded is None for s in second.samples), "the next step trains as usual"
    assert trainer.state.log_history[1]["episodes/errored"] == 0
    assert any(a != 0 for s in second.samples for a in s.credit.advantages)


def test_a_generator_can_fail_one_request_of_a_batch():
    batches = []

    def half(requests):
        batches.append(len(requests))
        return [Generation([5], [-1.0], "length") if r.prompt_ids[0] == 1 else ValueError("no") for r in requests]

    with BatchingTokenEndpoint(half) as endpoint:
        endpoint.episodes(2)  # one batch: it waits for both

        def tokens(first):
            status, answer = post(endpoint, {"token_ids": [first, 2], "sampling_params": {}})
            return json.loads(answer)["choices"][0]["token_ids"] if status == 200 else status

        import concurrent.futures

        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            assert list(pool.map(tokens, [1, 3])) == [[5], 500]
        assert batches == [2]


# -- the command -------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_command_trains_checkpoints_and_plots(model_dir, tmp_path):
    from verifiers_stepwise.hosts.trl.cli import main

    out = tmp_path / "run"
    trainer = main(
        [
            "--env-id", "stepwise-refine", "--estimator", "stepwise", "--options", '{"gamma": 0.9}',
            "--env-args", '{"max_turns": 2, "threshold": 2.0}', "--model", str(model_dir),
            "--output_dir", str(out), "--max_steps", "2", "--save_steps", "1",
            "--per_device_train_batch_size", "4", "--num_generations", "4", "--max_completion_length", "4",
            "--report_to", "none",
        ]
    )  # fmt: skip
    assert trainer.estimator.config.gamma == 0.9 and trainer.env.config.max_turns == 2
    assert (out / "reward_curve.png").stat().st_size > 0
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]
    assert (out / "model.safetensors").is_file()
    history = json.loads((out / "log_history.json").read_text())
    # a log entry per step: the command's --logging_steps default is 1
    assert [entry["turns/mean"] for entry in history if "turns/mean" in entry] == [2.0, 2.0]


@pytest.mark.slow
def test_the_command_evaluates_held_out_tasks_from_the_untrained_model_on(model_dir, tmp_path):
    """--eval-env-args: TRL's evaluation plays the held-out split's tasks, at step 0 (the untrained
    model, --eval_on_start) and every --eval_steps; the plot draws those points."""
    from verifiers_stepwise.hosts.trl.cli import main

    out = tmp_path / "run"
    trainer = main(
        [
            "--env-id", "stepwise-sums", "--env-args", '{"taskset": {"shots": 1}, "max_turns": 2}',
            "--eval-env-args", '{"taskset": {"split": "test", "a_range": [10, 14]}}', "--model", str(model_dir),
            "--output_dir", str(out), "--max_steps", "2", "--save_strategy", "no", "--report_to", "none",
            "--per_device_train_batch_size", "4", "--num_generations", "4", "--max_completion_length", "4",
            "--eval_strategy", "steps", "--eval_steps", "2", "--eval_on_start", "true",
            "--per_device_eval_batch_size", "9", "--num_generations_eval", "1",
        ]
    )  # fmt: skip
    history = json.loads((out / "log_history.json").read_text())
    assert [entry["step"] for entry in history if "eval_reward" in entry] == [0, 2]
    assert [entry["step"] for entry in history if "reward" in entry] == [1, 2]
    # the last batch is the last evaluation's: every held-out task once (a 10-14 + 1-9, every fifth pair)
    assert sorted(e.task.data.id for e in trainer.last_batch.episodes) == [f"sums-test-{i}" for i in range(9)]
    assert trainer.env.taskset.config.split == "train" and trainer.eval_env.taskset.config.shots == 1


def test_evaluation_without_held_out_tasks_is_refused_by_name():
    from verifiers_stepwise.hosts.trl.cli import main

    with pytest.raises(SystemExit, match="error: --eval_strategy steps: name the held-out tasks with --eval-env-args"):
        main(["--eval_strategy", "steps", "--output_dir", "/tmp/unused-vf-stepwise", "--model", "unused"])


def test_env_args_set_a_taskset_field_and_keep_the_env_id():
    """Regression: the documented ``--env-args '{"taskset": {"shots": 2}}'`` replaced the whole
    taskset table, dropping its id, and the command failed at load."""
    from verifiers_stepwise.hosts.trl.cli import blueprint

    flags = ["--env-id", "stepwise-sums", "--env-args", '{"taskset": {"shots": 2}, "max_turns": 2}']
    env = blueprint([*flags, "--report_to", "none"]).env
    assert env == {"taskset": {"id": "stepwise-sums", "shots": 2}, "max_turns": 2}
    loaded = vf.load_environment(vf.resolve_env_config(env))
    assert loaded.taskset.config.shots == 2 and loaded.config.max_turns == 2


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--estimator", "stepwize"], "error: --estimator: no advantage estimator named 'stepwize'; installed: "),
        (
            ["--estimator", "stepwise", "--options", '{"gama": 0.9}'],
            "error: --options: Stepwise config: field 'gama': unknown field",
        ),
        (["--options", '{"gama": 0.9}'], "error: --options: Stepwise config: field 'gama': unknown field"),
        (["--env-id", "stepwise-sumz"], "error: --env-id 'stepwise-sumz' with --env-args: taskset 'stepwise-sumz' "),
        (
            ["--env-args", '{"max_turnz": 3}'],
            "error: --env-id 'stepwise-refine' with --env-args: RefineConfig config: field 'max_turnz': unknown field",
        ),
        (
            ["--env-id", "stepwise-sums", "--eval-env-args", '{"taskset": {"splt": "test"}}'],
            "error: --eval-env-args: SumsConfig config: field 'taskset.splt': unknown field",
        ),
        (["--reading", "score"], "error: --reading 'score': choose one of ['rewards', 'scores']"),
        (["--format", "chat"], "error: --format: unknown format 'chat'"),
    ],
)
def test_a_wrong_name_or_option_is_one_line_before_the_model_loads(flags, message):
    """Issue #37: an unknown estimator, option or env id was reported after the model's ~20 s
    load, as a traceback. The command now checks its names first: with a ``--model`` that
    cannot load, the error is still the name's, one line."""
    from verifiers_stepwise.hosts.trl.cli import main

    with pytest.raises(SystemExit) as stopped:
        main([*flags, "--model", "/no/such/model", "--output_dir", "/tmp/unused-vf-stepwise", "--report_to", "none"])
    text = str(stopped.value.code)
    assert text.startswith(message) and "\n" not in text


@pytest.mark.slow
def test_the_command_names_an_unknown_estimator_in_one_line_without_a_traceback(tmp_path):
    import subprocess

    done = subprocess.run(
        [sys.executable, "-m", "verifiers_stepwise.hosts.trl", "--estimator", "stepwize", "--model", "/no/such/model",
         "--output_dir", str(tmp_path), "--report_to", "none"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.startswith("error: --estimator: no advantage estimator named 'stepwize'; installed: ")
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_the_command_names_a_bad_json_flag():
    from verifiers_stepwise.hosts.trl.cli import main

    with pytest.raises(SystemExit, match="--options: not JSON"):
        main(["--options", "{gamma: 1}", "--output_dir", "/tmp/unused-vf-stepwise", "--model", "unused"])


@pytest.mark.slow
def test_the_learning_benchmark_runs_end_to_end(model_dir, tmp_path):
    """benchmarks/trl_learning.py on the tiny model (the real run uses Gemma): tables, json, plot."""
    import trl_learning

    out = tmp_path / "bench"
    trl_learning.main(
        ["--out", str(out), "--steps", "1", "--seeds", "0", "--methods", "grpo", "kevin", "--held-out", "2",
         "--before-samples", "1", "--model", str(model_dir), "--scoring", "closeness", "--dtype", "float32", "bfloat16"]
    )  # fmt: skip
    result = json.loads((out / "results.json").read_text())
    assert [(r["method"], r["dtype"], len(r["steps"]), r["after"]["episodes"]) for r in result["runs"]] == [
        ("grpo (float32)", "float32", 1, 2),
        ("kevin (float32)", "float32", 1, 2),
        ("grpo (bfloat16)", "bfloat16", 1, 2),
        ("kevin (bfloat16)", "bfloat16", 1, 2),
    ]
    assert result["before"]["episodes"] == 2 and set(result["before_by_dtype"]) == {"float32", "bfloat16"}
    table = (out / "results.md").read_text()
    assert "| kevin (bfloat16) |" in table and "bfloat16: success" in table and (out / "curves.png").is_file()


@pytest.mark.slow
def test_the_learning_suite_runs_end_to_end_and_resumes(model_dir, tmp_path):
    """benchmarks/credit_suite.py on the tiny model (the real runs use Gemma): the rule on disk
    first, one file per run, paired intervals in the table, a rerun that trains nothing, and
    ``--replies`` (the untrained model's conversations) as docs/benchmarks.md shows it."""
    import credit_suite

    out = tmp_path / "suite"
    flags = ["--task", "independent", "--out", str(out), "--model", str(model_dir), "--workers", "1"]
    small = ["--steps", "1", "--tasks", "1", "--generations", "2", "--held-out", "2", "--before-samples", "1"]
    credit_suite.main([*flags, *small, "--seeds", "0", "1", "--methods", "grpo", "stepwise_g0"])
    result = json.loads((out / "results.json").read_text())
    assert result["rule"] == credit_suite.RULE and result["task"] == "independent"
    assert sorted(p.name for p in (out / "runs").iterdir()) == sorted(
        ["before.json", "grpo-0.json", "grpo-1.json", "stepwise_g0-0.json", "stepwise_g0-1.json"]
    )
    assert [(r["method"], r["seed"], len(r["steps"])) for r in result["runs"]] == [
        ("grpo", 0, 1), ("stepwise_g0", 0, 1), ("grpo", 1, 1), ("stepwise_g0", 1, 1)
    ]  # fmt: skip
    assert result["table"]["stepwise_g0"]["vs_grpo"]["seeds"] == 2 and (out / "curves.png").is_file()
    assert "| stepwise_g0 |" in (out / "results.md").read_text()
    written = {p: p.stat().st_mtime_ns for p in (out / "runs").iterdir()}
    credit_suite.main([*flags, *small, "--seeds", "0", "1", "--methods", "grpo", "stepwise_g0"])
    assert {p: p.stat().st_mtime_ns for p in (out / "runs").iterdir()} == written  # resumed: nothing retrained

    credit_suite.main([*flags, "--replies", "2"])
    replies = (out / "replies.md").read_text()
    assert replies.startswith("# independent: the untrained model's replies (stepwise-quiz, held-out)")
    assert replies.count("## ") == 2 and "[assistant]" in replies


# -- the text format, batching by episodes in flight, sampling logprobs, LoRA ------------------------

SUMS = {"taskset": {"id": "stepwise-sums", "shots": 1}, "max_turns": 3}


def test_the_text_format_continues_the_document_and_a_reply_ends_at_its_newline(tokenizer, tokenizer_dir):
    generate = Scripted(tokenizer, [" 13", " 12"], end="\n")
    (group,) = _episodes(tokenizer_dir, generate, env=SUMS, rollouts=1, format="text")
    (trace,) = group[0].traces
    assert len(trace.branches) == 1 and read_turns(trace).rewards == [-1.0, 1.0]  # a wrong try costs 1
    branch = trace.branches[0]
    prompt = group[0].task.data.prompt
    assert tokenizer.decode(branch.token_ids, skip_special_tokens=True) == prompt + " 13\ntoo high. 10 + 2 = 12\n"
    sampled = [t for t, m in zip(branch.token_ids, branch.sampled_mask) if m]
    assert sampled == [t for r in generate.replies for t in r + [generate.end]]
    first, second = generate.requests
    assert second.prompt_ids[: len(first.prompt_ids)] == first.prompt_ids
    assert generate.end in first.stop_token_ids


def test_the_text_format_closes_a_cut_reply_with_a_newline(tokenizer, tokenizer_dir):
    generate = Scripted(tokenizer, [" 1 3 5 7 9 11"], end="\n")
    (group,) = _episodes(tokenizer_dir, generate, env=SUMS, rollouts=1, max_tokens=2, format="text")
    (trace,) = group[0].traces
    assert len(trace.branches) == 1
    first, second = generate.requests[:2]
    assert second.prompt_ids[: len(first.prompt_ids) + 3] == first.prompt_ids + generate.replies[0][:2] + [generate.end]


def test_an_unknown_format_is_named():
    with pytest.raises(ValueError, match="unknown format 'chatml'"):
        renderer_config("chatml")


def test_a_batch_waits_for_every_episode_in_flight():
    """Requests sent 0.3 s apart (15× the old 20 ms window) reach the generator as one batch
    while three episodes are in flight; once one is done, the other two no longer wait for it."""
    import concurrent.futures
    import time

    sizes = []

    def echo(requests):
        sizes.append(len(requests))
        return [Generation([r.prompt_ids[0]], [-1.0], "stop") for r in requests]

    with BatchingTokenEndpoint(echo, max_wait=5.0) as endpoint:

        def call(first, delay):
            time.sleep(delay)
            return post(endpoint, {"token_ids": [first], "sampling_params": {}})[0]

        endpoint.episodes(3)
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            assert list(pool.map(call, [1, 2, 3], [0.0, 0.3, 0.6])) == [200] * 3
        endpoint.episode_done()
        start = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            assert list(pool.map(call, [1, 2], [0.0, 0.1])) == [200] * 2
        assert time.perf_counter() - start < 2.0  # not max_wait: nothing waits for the finished episode
    assert sizes == [3, 2]


def test_sampled_logprobs_are_the_log_softmax_of_the_sampling_distribution(tokenizer):
    """SampledLogprobs (one step's distribution at a time) against generate's full-vocabulary logits,
    at temperature 1 and 0.7 (transformers applies its temperature after a caller's processors)."""
    from verifiers_stepwise.hosts.trl.inference.sampling import SampledLogprobs

    model = tiny_model(tokenizer).eval()
    ids = torch.tensor([tokenizer.encode("12 + 3 =")] * 3)
    for temperature in (1.0, 0.7):
        torch.manual_seed(0)
        recorder = SampledLogprobs(temperature)
        with torch.no_grad():
            result = model.generate(
                input_ids=ids, max_new_tokens=5, do_sample=True, temperature=temperature, top_k=0, top_p=1.0,
                logits_processor=[recorder], output_logits=True, return_dict_in_generate=True,
                pad_token_id=tokenizer.pad_token_id,
            )  # fmt: skip
        sampled = result.sequences[:, ids.shape[1] :]
        logits = torch.stack(result.logits, dim=1).float() / temperature
        expected = torch.log_softmax(logits, -1).gather(-1, sampled.unsqueeze(-1)).squeeze(-1)
        assert torch.allclose(recorder.finish(result.sequences), expected, atol=1e-5)


def _lora(tokenizer, dtype=torch.float32, model_config=None, model=None, **config):
    from peft import LoraConfig, get_peft_model

    base = (model if model is not None else tiny_model(tokenizer, **(model_config or {}))).to(dtype)
    model = get_peft_model(base, LoraConfig(r=4, **{"target_modules": "all-linear", **config}))
    for name, p in model.named_parameters():
        if "lora_B" in name:  # a trained adapter, not the no-op it starts as
            torch.nn.init.normal_(p, std=0.5)
    return model


GREEDY = dict(max_tokens=4, temperature=0.0, top_p=1.0, stop_token_ids=[], seed=None, sampling={})


BIASED = {"model_config": {"attention_bias": True, "mlp_bias": True}, "lora_bias": True}


@pytest.mark.parametrize("config", [{}, {"use_dora": True}, BIASED], ids=["lora", "dora", "lora_bias"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_lora_samples_merged_and_the_frozen_weights_come_back_exactly(tokenizer, dtype, config):
    """Plain LoRA merges into the sampler's own buffer; DoRA and LoRA biases through peft's safe merge."""
    model = _lora(tokenizer, dtype, **config)
    if config is BIASED:  # a trained bias, too
        for name, p in model.named_parameters():
            if "lora_B" in name and name.endswith("bias"):
                torch.nn.init.normal_(p, std=0.5)
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    sampler = ModelSampler(lambda: model, tokenizer.pad_token_id)
    request = GenerateRequest(prompt_ids=tokenizer.encode("1 + 2 ="), **GREEDY)
    (merged,) = sampler([request])
    assert not any(getattr(m, "merged", False) for m in model.modules())
    assert all(torch.equal(p, frozen[n]) for n, p in model.named_parameters() if n in frozen)
    if dtype == torch.float32:  # greedy tokens as the unmerged adapters give them
        with torch.no_grad():
            out = model.generate(input_ids=torch.tensor([request.prompt_ids]), max_new_tokens=4, do_sample=False,
                                 pad_token_id=tokenizer.pad_token_id)  # fmt: skip
        assert merged.token_ids == out[0, len(request.prompt_ids) :].tolist()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_inside_a_merged_block_the_weights_are_peft_merge_adapters(tokenizer, dtype):
    """W + ΔW as peft's own merge_adapter computes them, marked merged as peft marks them."""
    model = _lora(tokenizer, dtype).eval()
    reference = copy.deepcopy(model)  # peft's unmerge would leave its rounding in model's own W
    with torch.no_grad():
        reference.merge_adapter()
    expected = {n: p for n, p in reference.named_parameters() if "base_layer" in n}
    sampler = ModelSampler(lambda: model, tokenizer.pad_token_id)
    with sampler.merged():
        assert all(m.merged for m in model.modules() if hasattr(m, "merged_adapters"))
        for name, p in model.named_parameters():
            if name in expected:
                assert torch.equal(p, expected[name]), name


def test_lora_on_tied_embeddings_leaves_the_frozen_weight_as_it_was(tokenizer):
    """Regression: with LoRA on both embed_tokens and lm_head of a tied model, two tuner layers
    share one W; closing a block put the weights back in merge order, which left the first
    layer's merged W + ΔW as the frozen weight, one more ΔW every block."""
    base = tiny_model(tokenizer)
    base.lm_head.weight = base.model.embed_tokens.weight  # tied, as Gemma's are
    model = _lora(tokenizer, model=base, target_modules=["embed_tokens", "lm_head"], init_lora_weights=False)
    weight = model.get_input_embeddings().get_base_layer().weight
    frozen = weight.detach().clone()
    sampler = ModelSampler(lambda: model, tokenizer.pad_token_id)
    for _ in range(2):
        with sampler.merged():
            pass
        assert torch.equal(weight, frozen)


def test_a_merge_that_fails_leaves_nothing_merged_and_the_next_block_merges(tokenizer):
    """Regression: peft's safe merge (DoRA here) raises on a NaN adapter; the block's count stayed
    at 1 with the layers before it merged, so every later block was nested in it: never closed,
    the model left in eval mode and the merged LoRA layers training no adapter."""
    model = _lora(tokenizer, use_dora=True)
    model.train()
    layers = [m for m in model.modules() if hasattr(m, "merged_adapters")]
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    weight = layers[-1].lora_B["default"].weight
    kept = weight.detach().clone()
    with torch.no_grad():
        weight[0, 0] = float("nan")
    sampler = ModelSampler(lambda: model, tokenizer.pad_token_id)
    with pytest.raises(ValueError, match="NaN"):
        with sampler.merged():
            pass
    assert model.training and not any(m.merged for m in layers)
    assert all(torch.equal(p, frozen[n]) for n, p in model.named_parameters() if n in frozen)
    with torch.no_grad():
        weight.copy_(kept)
    with sampler.merged():
        assert all(m.merged for m in layers)
    assert model.training and not any(m.merged for m in layers)


def test_a_model_moved_to_another_dtype_after_sampling_samples_again(tokenizer):
    """Regression: each layer's merge buffer was made at the first merge and kept, so after
    ``model.to(torch.bfloat16)`` a float32 W + ΔW went into the bfloat16 model and generate failed."""
    model = _lora(tokenizer)
    sampler = ModelSampler(lambda: model, tokenizer.pad_token_id)
    request = GenerateRequest(prompt_ids=tokenizer.encode("1 + 2 ="), **{**GREEDY, "max_tokens": 2})
    sampler([request])
    model.to(torch.bfloat16)
    sampler([request])
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())


def test_lora_on_a_parameter_other_than_weight_merges_and_comes_back(tokenizer):
    """Regression: peft's ``target_parameters`` (a ``ParamWrapper``, e.g. MoE experts) adapts a
    parameter of its own name; the out-of-place merge read ``base.weight`` and raised
    AttributeError where the module has none."""
    from peft import LoraConfig, get_peft_model

    class Experts(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gate = torch.nn.Parameter(torch.randn(4, 8, 8))

        def forward(self, x):
            return torch.einsum("bi,eij->bj", x, self.gate)

    torch.manual_seed(0)
    config = LoraConfig(r=2, target_modules=[], target_parameters=["0.gate"], init_lora_weights=False)
    model = get_peft_model(torch.nn.Sequential(Experts(), torch.nn.Linear(8, 8)), config)
    (layer,) = [m for m in model.modules() if hasattr(m, "parameter_name")]
    gate = layer.get_base_layer().gate
    frozen, x = gate.detach().clone(), torch.randn(3, 8)
    with torch.no_grad():
        unmerged = model(x)
    sampler = ModelSampler(lambda: model, tokenizer.pad_token_id)
    with sampler.merged(), torch.no_grad():
        assert layer.merged and not torch.equal(gate, frozen)
        assert torch.allclose(model(x), unmerged, atol=1e-5)
    assert not layer.merged and torch.equal(gate, frozen)


def test_a_merged_block_merges_once_for_every_call_inside_it(tokenizer):
    model = _lora(tokenizer)
    model.train()
    layer = next(m for m in model.modules() if hasattr(m, "get_delta_weight"))
    merges = []
    delta = layer.get_delta_weight
    layer.get_delta_weight = lambda *a, **k: (merges.append(1), delta(*a, **k))[1]  # type: ignore[method-assign]
    sampler = ModelSampler(lambda: model, tokenizer.pad_token_id)
    request = GenerateRequest(prompt_ids=tokenizer.encode("1 + 2 ="), **{**GREEDY, "max_tokens": 2})
    with sampler.merged():
        assert not model.training and all(m.merged for m in model.modules() if hasattr(m, "merged_adapters"))
        sampler([request])
        sampler([request])
    assert len(merges) == 1 and model.training
    assert not any(getattr(m, "merged", False) for m in model.modules())
    sampler([request])  # outside a block: a merge for the call
    assert len(merges) == 2 and model.training


@pytest.mark.slow
def test_the_command_trains_lora_and_saves_the_adapter_without_optimizer_state(model_dir, tmp_path):
    from verifiers_stepwise.hosts.trl.cli import main

    out = tmp_path / "lora"
    main(
        [
            "--env-id", "stepwise-sums", "--model", str(model_dir), "--output_dir", str(out), "--max_steps", "1",
            "--save_steps", "1", "--per_device_train_batch_size", "4", "--num_generations", "4",
            "--max_completion_length", "3", "--report_to", "none", "--use_peft", "--lora_target_modules", "all-linear",
        ]
    )  # fmt: skip
    assert (out / "adapter_model.safetensors").is_file() and not (out / "model.safetensors").exists()
    (checkpoint,) = out.glob("checkpoint-*")
    assert (checkpoint / "adapter_model.safetensors").is_file() and not (checkpoint / "optimizer.pt").exists()


@pytest.mark.slow
def test_the_step_cost_benchmark_runs_end_to_end(model_dir, tmp_path):
    """benchmarks/trl_step_cost.py on the tiny model (the real run uses Gemma): both trainers, one pair."""
    import trl_step_cost

    out = tmp_path / "cost"
    trl_step_cost.main(["--out", str(out), "--pairs", "1", "--steps", "2", "--model", str(model_dir)])
    runs = json.loads((out / "results.json").read_text())["runs"]
    assert [r["trainer"] for r in runs] == ["host", "trl"]
    assert all(r["warm_step_s"] > 0 and r["generation_tokens_per_s"] > 0 for r in runs)
    assert "host / TRL per pair" in (out / "results.md").read_text()


@pytest.mark.parametrize("slowdown", [60.0, 0.4])
def test_the_command_warns_when_bfloat16_is_slow_on_this_cpu(monkeypatch, tmp_path, capsys, slowdown):
    """An AVX2-only CPU ran the README's bfloat16 step ~100 s against ~9 s where the CPU has bf16 instructions."""
    import verifiers_stepwise.hosts.trl.inference.model as model_module
    from verifiers_stepwise.hosts.trl.cli import main

    class Loaded(Exception):
        pass

    def load(*args):
        raise Loaded

    monkeypatch.setattr(model_module, "bfloat16_slowdown", lambda: slowdown)
    monkeypatch.setattr(model_module, "load_model", load)
    with pytest.raises(Loaded):
        main(["--env-id", "stepwise-sums", "--dtype", "bfloat16", "--output_dir", str(tmp_path)])
    warned = "--dtype float32 trains several times faster here" in capsys.readouterr().err
    assert warned == (slowdown > 4)
    assert 0 < model_module.bfloat16_slowdown() < 1e6  # the real measurement runs

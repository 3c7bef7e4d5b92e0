"""Policy-gradient training where each turn is its own sample, weighted by its own advantage.

One step (GRPO-style groups; Kevin's "each turn is a training sample"):

    draw B prompts; roll out G episodes per prompt        N = B·G episodes of T_n ≤ T turns
    A = estimator.batched(RaggedBatch(rewards, T_n each, G each, states x_t))   per played turn
    loss = −(1 / (N·T)) Σ_{n, t < T_n} A_{n,t} · log π(a_{n,t} | p_n, x_{n,t})
    one Adam step on the policy table; evaluate the new policy exactly (``exact.evaluate``)

Everything random comes from one ``torch.Generator`` seeded by ``TrainConfig.seed`` and is
drawn in the same order whatever the estimator, so two estimators that give identical
advantages give identical runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from credit_lab.exact import evaluate, return_gradient, true_advantages
from credit_lab.policy import Rollouts, TabularPolicy, rollout
from credit_lab.signal import SignalTrace
from credit_lab.tasks import Task
from verifiers_stepwise import Estimator, RaggedBatch

__all__ = ["Run", "TrainConfig", "draw_prompts", "train", "turn_advantages"]


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 300
    """Policy updates."""
    groups: int = 8
    """Prompts per step (B), drawn without replacement when B ≤ P."""
    group_size: int = 8
    """Rollouts per prompt (G), the group every baseline is computed in."""
    lr: float = 0.1
    """Adam learning rate on the logits."""
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("steps", "groups", "group_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"TrainConfig.{name} must be >= 1, got {getattr(self, name)}")
        if not self.lr > 0:
            raise ValueError(f"TrainConfig.lr must be > 0, got {self.lr}")

    @property
    def episodes_per_step(self) -> int:
        return self.groups * self.group_size


@dataclass(frozen=True)
class Run:
    success: np.ndarray
    """(steps + 1,) exact success rate before the first update and after each one."""
    expected_return: np.ndarray
    """(steps + 1,) exact expected undiscounted return, same points."""
    episodes_per_step: int
    signal: SignalTrace

    @property
    def episodes(self) -> np.ndarray:
        """(steps + 1,) training episodes consumed at each point of the curves."""
        return np.arange(self.success.size) * self.episodes_per_step

    def steps_to(self, target: float) -> int | None:
        """First update after which the success rate is at least ``target`` (None: never)."""
        reached = np.flatnonzero(self.success >= target)
        return int(reached[0]) if reached.size else None

    def episodes_to(self, target: float) -> int | None:
        steps = self.steps_to(target)
        return None if steps is None else steps * self.episodes_per_step


def turn_advantages(
    estimator: Estimator,
    rewards: torch.Tensor,
    group_size: int,
    lengths: torch.Tensor | None = None,
    states: torch.Tensor | None = None,
) -> torch.Tensor:
    """(N, T) advantages for (N, T) rewards laid out group by group (G consecutive rows each).

    Row n is a trajectory of its first ``lengths[n]`` turns (all T when None); the turns after
    it get advantage 0 (they were not played). ``states`` (N, T), the state x_t each turn
    acted in, are the anchor states (``RaggedBatch.states``; a group shares its prompt, so x_t
    alone is what the policy sees), read by ``gigpo`` and ignored by the other estimators.
    """
    n, turns = rewards.shape
    played = torch.ones_like(rewards, dtype=torch.bool) if lengths is None else torch.arange(turns) < lengths[:, None]
    batch = RaggedBatch(
        rewards[played].numpy(),
        played.sum(1).numpy(),
        np.full(n // group_size, group_size, dtype=np.int64),
        None if states is None else states[played].numpy(),
    )
    advantages = torch.zeros_like(rewards)
    advantages[played] = torch.from_numpy(estimator.batched(batch))
    return advantages


def draw_prompts(task: Task, config: TrainConfig, generator: torch.Generator) -> torch.Tensor:
    """(B·G,) prompt of each episode: B prompts, each repeated G times (one group each)."""
    if config.groups <= task.n_prompts:
        chosen = torch.randperm(task.n_prompts, generator=generator)[: config.groups]
    else:
        chosen = torch.randint(task.n_prompts, (config.groups,), generator=generator)
    return chosen.repeat_interleave(config.group_size)


def _measure(
    signal: SignalTrace,
    task: Task,
    probs: torch.Tensor,
    batch: Rollouts,
    advantages: torch.Tensor,
    update: torch.Tensor,
) -> None:
    """Compare the batch's advantages and update with the exact ones (see ``signal.py``)."""
    exact = true_advantages(task, probs)
    turn, prompt = torch.arange(task.turns), batch.prompts[:, None]
    true = exact[turn, prompt, batch.states, batch.actions]
    cells = ((turn * task.n_prompts + prompt) * task.n_states + batch.states) * task.n_actions + batch.actions
    played = batch.played
    signal.add(
        advantages[played].numpy(),
        true[played].numpy(),
        cells[played].numpy(),
        turn.expand_as(batch.states)[played].numpy(),
        update=update,
        gradient=return_gradient(task, probs, exact),
        n_turns=task.turns,
    )


def train(task: Task, estimator: Estimator, config: TrainConfig) -> Run:
    """Train a fresh uniform tabular policy on ``task`` with ``estimator``'s per-turn credit."""
    generator = torch.Generator().manual_seed(config.seed)
    policy = TabularPolicy(task)
    optimizer = torch.optim.Adam(policy.parameters(), lr=config.lr)
    first = evaluate(task, policy.probs())
    success, expected_return = [first.success], [first.expected_return]
    signal = SignalTrace()
    for _ in range(config.steps):
        probs = policy.probs()
        batch = rollout(task, policy, draw_prompts(task, config, generator), generator)
        advantages = turn_advantages(estimator, batch.rewards, config.group_size, batch.lengths, batch.states)

        log_prob = policy.log_prob(batch.observations(task.n_states), batch.actions)
        loss = -(advantages * log_prob).mean()
        optimizer.zero_grad()
        loss.backward()

        _measure(signal, task, probs, batch, advantages, update=-policy.logits.grad)
        optimizer.step()

        after = evaluate(task, policy.probs())
        success.append(after.success)
        expected_return.append(after.expected_return)
    return Run(np.array(success), np.array(expected_return), config.episodes_per_step, signal)

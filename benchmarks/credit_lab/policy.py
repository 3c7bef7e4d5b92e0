"""A tabular softmax policy and batched rollouts of it on a task.

π(a | p, x) = softmax(θ[p·X + x])_a with θ (P·X, A), all zeros at the start (uniform). All
episodes of a batch advance together: one tensor operation per turn, none per episode.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from credit_lab.tasks import Task

__all__ = ["Rollouts", "TabularPolicy", "rollout"]


class TabularPolicy(torch.nn.Module):
    def __init__(self, task: Task) -> None:
        super().__init__()
        self.shape = (task.n_prompts, task.n_states, task.n_actions)
        self.logits = torch.nn.Parameter(torch.zeros(task.n_observations, task.n_actions, dtype=torch.float64))

    def probs(self) -> torch.Tensor:
        """(P, X, A) action probabilities of every (prompt, state)."""
        return torch.softmax(self.logits.detach(), dim=-1).reshape(self.shape)

    def log_prob(self, observations: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """log π(a | o) for matching tensors of observation indices and actions (differentiable)."""
        log_probs = torch.log_softmax(self.logits[observations], dim=-1)
        return log_probs.gather(-1, actions[..., None])[..., 0]


@dataclass(frozen=True)
class Rollouts:
    """N episodes of up to T turns; row n is episode n, column t is turn t. Turns at or after
    ``lengths[n]`` (the episode had ended in a terminal state) hold reward 0 and are not played."""

    prompts: torch.Tensor  # (N,) long
    states: torch.Tensor  # (N, T) long, x_t: the state turn t acted in
    actions: torch.Tensor  # (N, T) long
    rewards: torch.Tensor  # (N, T) float64, r_t
    solved: torch.Tensor  # (N,) bool
    lengths: torch.Tensor  # (N,) long, turns played

    @property
    def played(self) -> torch.Tensor:
        """(N, T) bool: turn t was played."""
        return torch.arange(self.states.shape[1]) < self.lengths[:, None]

    def observations(self, n_states: int) -> torch.Tensor:
        """(N, T) rows of the policy table each turn read: p·X + x_t."""
        return self.prompts[:, None] * n_states + self.states


def rollout(task: Task, policy: TabularPolicy, prompts: torch.Tensor, generator: torch.Generator) -> Rollouts:
    """Sample one episode per entry of ``prompts`` (N,), all turns batched."""
    n = prompts.numel()
    probs = policy.probs().reshape(task.n_observations, task.n_actions)
    states = torch.empty(n, task.turns, dtype=torch.long)
    actions = torch.empty(n, task.turns, dtype=torch.long)
    rewards = torch.empty(n, task.turns, dtype=torch.float64)
    x = task.start[prompts]
    going = torch.ones(n, dtype=torch.bool)
    lengths = torch.zeros(n, dtype=torch.long)
    for t in range(task.turns):
        states[:, t] = x
        # every episode draws, ended or not, so the random stream never depends on who ended
        a = torch.multinomial(probs[prompts * task.n_states + x], 1, generator=generator)[:, 0]
        actions[:, t] = a
        moved = torch.where(going, task.next_state[x, a], x)
        rewards[:, t] = torch.where(going, task.reward[t, prompts, moved], 0.0)
        lengths += going
        going = going & ~task.terminal[prompts, moved]
        x = moved
    return Rollouts(prompts, states, actions, rewards, task.success[prompts, x], lengths)

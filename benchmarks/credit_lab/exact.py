"""Exact evaluation of a tabular policy on a task, by dynamic programming over its tables.

The tasks are small and deterministic, so nothing needs sampling. With π (P, X, A):

    forward:   d_0[p, x] = [x = start[p]] / P                       (prompts uniform)
               n_t[p, x'] = Σ_{x, a: next_state[x, a] = x'} d_t[p, x] π[p, x, a]   (arrivals)
               d_{t+1} = n_t · (1 − terminal)                        (episodes still going)
               success = Σ_{p,x} (d_T + Σ_t n_t · terminal)[p, x] · success[p, x]
               J       = Σ_t Σ_{p,x} n_t[p, x] · reward[t, p, x]      (expected total reward)

    backward:  V_T = 0,
               Q_t[p, x, a] = reward[t, p, x'] + (1 − terminal[p, x']) V_{t+1}[p, x']
               V_t[p, x] = Σ_a π[p, x, a] Q_t[p, x, a]
               A*_t = Q_t − V_t                                        (T, P, X, A)

    gradient:  ∂J / ∂θ[(p, x), a] = Σ_t d_t[p, x] π[p, x, a] A*_t[p, x, a]
               (policy-gradient theorem for a softmax table θ shared by all turns)

A*_t is the true advantage of an action under the task's own, undiscounted objective J: the
signal a per-turn advantage estimate should carry.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from credit_lab.tasks import Task

__all__ = ["Evaluation", "evaluate", "flows", "occupancy", "return_gradient", "true_advantages"]


@dataclass(frozen=True)
class Evaluation:
    success: float
    """Probability that an episode on a uniformly drawn prompt ends solved."""
    expected_return: float
    """J: expected undiscounted total reward of an episode on a uniformly drawn prompt."""


def occupancy(task: Task, probs: torch.Tensor) -> torch.Tensor:
    """(T + 1, P, X): d_t, the probability of being at prompt p in state x before turn t."""
    return flows(task, probs)[0]


def flows(task: Task, probs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """d (T + 1, P, X), episodes still going before turn t, and n (T, P, X), arrivals of turn t."""
    d = torch.zeros(task.n_prompts, task.n_states, dtype=probs.dtype)
    d[torch.arange(task.n_prompts), task.start] = 1.0 / task.n_prompts
    flat_next = task.next_state.reshape(-1)
    going = (~task.terminal).to(probs.dtype)
    steps, arrivals = [d], []
    for _ in range(task.turns):  # out of place, so the result stays differentiable in probs
        flow = (steps[-1][:, :, None] * probs).reshape(task.n_prompts, -1)
        arrivals.append(torch.zeros_like(d).index_add(1, flat_next, flow))
        steps.append(arrivals[-1] * going)
    return torch.stack(steps), torch.stack(arrivals)


def evaluate(task: Task, probs: torch.Tensor) -> Evaluation:
    """Success rate and expected return of the policy ``probs`` (P, X, A), exactly."""
    d, n = flows(task, probs)
    ended = d[-1] + (n * task.terminal).sum(0)
    success = (ended * task.success).sum()
    expected_return = (n * task.reward).sum()
    return Evaluation(float(success), float(expected_return))


def true_advantages(task: Task, probs: torch.Tensor) -> torch.Tensor:
    """(T, P, X, A) float64: A*_t[p, x, a] = Q_t[p, x, a] − V_t[p, x] under ``probs``."""
    prompts = torch.arange(task.n_prompts)[:, None, None]
    nxt = task.next_state[None]  # (1, X, A)
    value = torch.zeros(task.n_prompts, task.n_states, dtype=probs.dtype)
    going = (~task.terminal).to(probs.dtype)
    advantages = torch.empty(task.turns, *probs.shape, dtype=probs.dtype)
    for t in reversed(range(task.turns)):
        q = task.reward[t][prompts, nxt] + going[prompts, nxt] * value[prompts, nxt]
        value = (probs * q).sum(-1)
        advantages[t] = q - value[..., None]
    return advantages


def return_gradient(task: Task, probs: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """(P·X, A) ∇_θ J of the softmax table, from ``true_advantages(task, probs)``."""
    d = occupancy(task, probs)[:-1]
    gradient = (d[..., None] * probs * advantages).sum(0)
    return gradient.reshape(task.n_observations, task.n_actions)

"""Small deterministic multi-turn tasks with a known optimum, stored as tensor tables.

Every task is a finite, deterministic episode of T turns over prompts p, states x, actions a:

    p ~ Uniform{0..P−1}                 a group of rollouts shares one prompt (as in GRPO)
    x_0 = start[p]
    a_t ~ π(· | p, x_t)                 the policy sees (prompt, state), not the turn index
    x_{t+1} = next_state[x_t, a_t]
    r_t = reward[t, p, x_{t+1}]         one reward per turn (0.0 where a task scores nothing)
    solved = success[p, x_T]

Keeping all tasks in this one form means rollouts, exact evaluation and exact advantages
(``exact.py``) are written once. Shapes: start (P,), next_state (X, A), reward (T, P, X),
success (P, X). Nothing here was chosen to favour an estimator; the optimum of each task is
stated in its builder's docstring and checked by the tests.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

__all__ = ["TASKS", "Task", "refine", "single_turn"]


@dataclass(frozen=True, eq=False)
class Task:
    name: str
    start: torch.Tensor  # (P,) long
    next_state: torch.Tensor  # (X, A) long
    reward: torch.Tensor  # (T, P, X) float64
    success: torch.Tensor  # (P, X) bool
    summary: str

    def __post_init__(self) -> None:
        n_states = self.next_state.shape[0]
        _, prompts, states = self.reward.shape
        if (prompts, states) != tuple(self.success.shape) or states != n_states:
            raise ValueError(f"task {self.name!r}: reward, success and next_state disagree on P or X")
        if self.start.shape != (prompts,):
            raise ValueError(f"task {self.name!r}: start must have one state per prompt")

    @property
    def n_prompts(self) -> int:
        return self.start.numel()

    @property
    def n_states(self) -> int:
        return self.next_state.shape[0]

    @property
    def n_actions(self) -> int:
        return self.next_state.shape[1]

    @property
    def turns(self) -> int:
        return self.reward.shape[0]

    @property
    def n_observations(self) -> int:
        """Rows of a tabular policy: one per (prompt, state), index p·X + x."""
        return self.n_prompts * self.n_states


def _bits(n_bits: int) -> torch.Tensor:
    """(2^D, D) long: row v holds the bits of v, least significant first."""
    values = torch.arange(2**n_bits)
    return (values[:, None] >> torch.arange(n_bits)) & 1


def _score(n_bits: int) -> torch.Tensor:
    """(2^D targets, 2^D drafts) float64: fraction of the D bits the draft gets right."""
    bits = _bits(n_bits)
    return (bits[:, None, :] == bits[None, :, :]).double().mean(-1)


def refine(n_bits: int = 4, turns: int = 6, reward: Literal["every_turn", "outcome"] = "every_turn") -> Task:
    """Refine a draft toward a hidden target; each turn edits the draft and is scored.

    - Prompts: the 2^D targets, D-bit strings (D = ``n_bits``); the prompt id tells the
      policy which target it works on, as a task statement would.
    - State: the current draft, a D-bit string (2^D states). The first draft is all zeros.
    - Actions: flip bit i (i < D), or keep the draft (a = D). A wrong flip can be undone by
      flipping the same bit again, which costs two turns.
    - Rewards, ``reward="every_turn"`` (Kevin's setting: every refined kernel is run and
      scored): r_t = fraction of the draft's bits that match the target after turn t.
      ``reward="outcome"``: r_t = 0 for t < T−1 and r_{T−1} = 1 if the final draft is the
      target, else 0 (only the last turn is rewarded, as in a math answer checked once).
    - Solved: the final draft equals the target.
    - Known optimum (any γ, both reward modes): flip each wrong bit once, in any order, then
      keep. With T ≥ D every target is solvable, so the optimal success rate is 1; with
      T ≥ D + 2, as by default, even the hardest target leaves room to repair one wrong flip.
      For a target at Hamming distance d from the start, the optimal every-turn return is
      Σ_{t=1..T} min(D, D − d + t) / D.
    """
    if n_bits < 1 or turns < n_bits:
        raise ValueError(f"refine needs n_bits >= 1 and turns >= n_bits, got {n_bits=} {turns=}")
    if reward not in ("every_turn", "outcome"):
        raise ValueError(f"refine reward must be 'every_turn' or 'outcome', got {reward!r}")
    size = 2**n_bits
    drafts = torch.arange(size)
    flips = drafts[:, None] ^ (1 << torch.arange(n_bits))[None, :]
    next_state = torch.cat([flips, drafts[:, None]], dim=1)  # (X, D + 1): flip i, then keep
    score = _score(n_bits)  # (P = targets, X = drafts)
    solved = score == 1.0
    if reward == "every_turn":
        rewards = score.expand(turns, size, size).clone()
        name, what = "refine", "every turn scored by matching bits"
    else:
        rewards = torch.zeros(turns, size, size, dtype=torch.float64)
        rewards[-1] = solved.double()
        name, what = "outcome", "only the last turn rewarded (1 if solved)"
    return Task(
        name=name,
        start=torch.zeros(size, dtype=torch.long),
        next_state=next_state,
        reward=rewards,
        success=solved,
        summary=f"{n_bits}-bit refinement, {turns} turns, {what}",
    )


def single_turn(n_bits: int = 4) -> Task:
    """The refinement task in one turn: answer the whole target at once.

    - Prompts: the 2^D targets. State 0 is "unanswered"; state 1 + k is "answered k".
    - Actions: the 2^D possible answers.
    - Reward: one turn, r_0 = fraction of the answer's bits that match the target.
    - Solved: the answer is the target. Known optimum: answer the target (success 1, r = 1).

    With one turn per trajectory every estimator here reduces to group-normalized rewards, so
    this is the control: learning curves must coincide (leave-one-out differs by n/(n − 1)).
    """
    size = 2**n_bits
    next_state = (1 + torch.arange(size)).expand(size + 1, size).clone()  # (X = 1 + 2^D, A)
    score = torch.cat([torch.zeros(size, 1, dtype=torch.float64), _score(n_bits)], dim=1)
    return Task(
        name="single_turn",
        start=torch.zeros(size, dtype=torch.long),
        next_state=next_state,
        reward=score[None].clone(),
        success=score == 1.0,
        summary=f"{n_bits}-bit answer in one turn, scored by matching bits",
    )


TASKS: dict[str, Callable[[], Task]] = {
    "refine": refine,
    "outcome": lambda: refine(reward="outcome"),
    "single_turn": single_turn,
}
"""The benchmark's tasks by name, with their default sizes."""

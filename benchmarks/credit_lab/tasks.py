"""Small deterministic multi-turn tasks with a known optimum, stored as tensor tables.

Every task is a finite, deterministic episode of T turns over prompts p, states x, actions a:

    p ~ Uniform{0..P−1}                 a group of rollouts shares one prompt (as in GRPO)
    x_0 = start[p]
    a_t ~ π(· | p, x_t)                 the policy sees (prompt, state), not the turn index
    x_{t+1} = next_state[x_t, a_t]
    r_t = reward[t, p, x_{t+1}]         one reward per turn (0.0 where a task scores nothing)
    the episode ends after turn t if terminal[p, x_{t+1}] (else after T turns)
    solved = success[p, x_end]

Keeping all tasks in this one form means rollouts, exact evaluation and exact advantages
(``exact.py``) are written once. Shapes: start (P,), next_state (X, A), reward (T, P, X),
success (P, X), terminal (P, X) (default all False: every episode lasts T turns). Nothing
here was chosen to favour an estimator; the optimum of each task is stated in its builder's
docstring and checked by the tests.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

__all__ = ["TASKS", "Task", "detour", "refine", "refine_pm1", "single_turn", "submit"]


@dataclass(frozen=True, eq=False)
class Task:
    name: str
    start: torch.Tensor  # (P,) long
    next_state: torch.Tensor  # (X, A) long
    reward: torch.Tensor  # (T, P, X) float64
    success: torch.Tensor  # (P, X) bool
    summary: str
    terminal: torch.Tensor | None = None  # (P, X) bool: the episode ends on arriving there

    def __post_init__(self) -> None:
        if self.terminal is None:
            object.__setattr__(self, "terminal", torch.zeros_like(self.success))
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


def refine_pm1(n_bits: int = 4, turns: int = 6) -> Task:
    """Refinement scored like DAPO refine: every attempt is checked, −1 wrong, +1 right, and a
    right attempt ends the episode (so trajectories have different lengths).

    - Prompts, states, actions: as ``refine`` (flip bit i, or keep).
    - r_t = +1 if the draft after turn t is the target (the episode then ends), else −1.
    - Known optimum: flip each wrong bit once (d turns for a target at distance d, the first
      d − 1 of them necessarily wrong); success 1 since T ≥ D. The all-zero target is solved by
      its first "keep" (a = D); every other target's first attempts must be wrong.
    """
    base = refine(n_bits, turns)
    solved = base.success
    rewards = torch.where(solved, 1.0, -1.0).double().expand(turns, *solved.shape).clone()
    return Task(
        name="refine_pm1",
        start=base.start,
        next_state=base.next_state,
        reward=rewards,
        success=solved,
        terminal=solved.clone(),
        summary=f"{n_bits}-bit refinement, {turns} turns, ±1 per attempt, stops when right (DAPO refine)",
    )


def submit(n_bits: int = 3, turns: int = 6) -> Task:
    """The policy chooses when to stop: edit a draft, then submit it.

    - Prompts: the 2^D targets. States: drafting draft x (2^D), or "submitted x" (2^D more,
      terminal). Actions: flip bit i, keep, or submit (a = D + 1).
    - Rewards: 0 for an edit; submitting scores +1 if the draft is the target, else −1; an
      episode that reaches turn T without submitting gets −1 on its last turn (timeout).
    - Solved: submitted the target. Known optimum: flip each wrong bit once, then submit
      (d + 1 turns ≤ T for T ≥ D + 1), return +1.
    """
    if turns < n_bits + 1:
        raise ValueError(f"submit needs turns >= n_bits + 1, got {n_bits=} {turns=}")
    size = 2**n_bits
    drafts = torch.arange(size)
    flips = drafts[:, None] ^ (1 << torch.arange(n_bits))[None, :]
    drafting = torch.cat([flips, drafts[:, None], size + drafts[:, None]], dim=1)  # flip, keep, submit
    submitted = (size + drafts)[:, None].expand(size, n_bits + 2)  # never left (terminal)
    next_state = torch.cat([drafting, submitted])  # (2·2^D, D + 2)
    right = torch.eye(size, dtype=torch.bool)  # (P, drafts)
    success = torch.cat([torch.zeros_like(right), right], dim=1)
    terminal = torch.cat([torch.zeros_like(right), torch.ones_like(right)], dim=1)
    rewards = torch.zeros(turns, size, 2 * size, dtype=torch.float64)
    rewards[:, :, size:] = torch.where(right, 1.0, -1.0).double()
    rewards[-1, :, :size] = -1.0
    return Task(
        name="submit",
        start=torch.zeros(size, dtype=torch.long),
        next_state=next_state,
        reward=rewards,
        success=success,
        terminal=terminal,
        summary=f"{n_bits}-bit drafts, up to {turns} turns; the policy submits when it chooses (±1)",
    )


def detour(length: int = 3, turns: int = 6) -> Task:
    """The best path first lowers the score: walk down a valley to reach the goal.

    - Prompts: the goal lies to the right (p = 0) or to the left (p = 1) of the start.
    - States: positions 0..2L on a line, start L. Actions: left, right, stay.
    - Reward every turn: the score of the new position. On the goal's side the score falls
      from 0.4 at the start by 0.4 / L per step (0.267, 0.133 for L = 3), then the goal (the
      end of the line) scores 1; the other side scores 0.3 everywhere (a decoy).
    - Solved: at the goal after T turns. Known optimum: walk straight to the goal, then stay:
      the falling scores, then (T − L + 1) · 1, e.g. 0.267 + 0.133 + 4 = 4.4 for L = 3, T = 6,
      against 0.4 · T = 2.4 for staying put.
    """
    if length < 2 or turns < length:
        raise ValueError(f"detour needs length >= 2 and turns >= length, got {length=} {turns=}")
    n = 2 * length + 1
    position = torch.arange(n)
    next_state = torch.stack([(position - 1).clamp(min=0), (position + 1).clamp(max=n - 1), position], dim=1)
    right = torch.full((n,), 0.3, dtype=torch.float64)
    steps = torch.arange(length + 1, dtype=torch.float64)
    right[length:] = 0.4 - 0.4 * steps / length
    right[-1] = 1.0
    score = torch.stack([right, right.flip(0)])  # (P = 2, X)
    success = torch.zeros(2, n, dtype=torch.bool)
    success[0, -1] = success[1, 0] = True
    return Task(
        name="detour",
        start=torch.full((2,), length, dtype=torch.long),
        next_state=next_state,
        reward=score.expand(turns, 2, n).clone(),
        success=success,
        summary=f"walk {length} steps down a valley to the goal, {turns} turns, every turn scored",
    )


TASKS: dict[str, Callable[[], Task]] = {
    "refine": refine,
    "outcome": lambda: refine(reward="outcome"),
    "single_turn": single_turn,
    "refine_pm1": refine_pm1,
    "submit": submit,
    "detour": detour,
}
"""The benchmark's tasks by name, with their default sizes."""

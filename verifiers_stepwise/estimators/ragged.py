"""A ragged batch of per-turn rewards: groups of trajectories of different lengths.

Layout (all numpy, no Python objects per turn):

    rewards      (n_turns,)  float64   every turn of every trajectory, concatenated
                                       group by group, trajectory by trajectory
    lengths      (n_traj,)   int64     turns per trajectory, each >= 1
    group_sizes  (n_groups,) int64     trajectories per group, each >= 1
    states       (n_turns,)  int64     optional: the anchor state each turn acted from, as an
                                       id >= 0 compared only within its group; -1 for none

Index arrays derived from the lengths (turn position, group of a turn, ...) are computed once,
on first use, and are pure functions of the three arrays above.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import accumulate, chain

import numpy as np

from verifiers_stepwise.errors import RewardError

__all__ = ["RaggedBatch"]


@dataclass(frozen=True, eq=False)
class RaggedBatch:
    rewards: np.ndarray
    lengths: np.ndarray
    group_sizes: np.ndarray
    states: np.ndarray | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "rewards", np.ascontiguousarray(self.rewards, dtype=np.float64))
        object.__setattr__(self, "lengths", np.ascontiguousarray(self.lengths, dtype=np.int64))
        object.__setattr__(self, "group_sizes", np.ascontiguousarray(self.group_sizes, dtype=np.int64))
        rewards, lengths, group_sizes = self.rewards, self.lengths, self.group_sizes
        if rewards.ndim != 1 or lengths.ndim != 1 or group_sizes.ndim != 1:
            raise RewardError("rewards, lengths and group_sizes must be one-dimensional arrays")
        if lengths.size and lengths.min() < 1:
            g, j = self._locate_trajectory(int(np.argmin(lengths >= 1)))
            raise RewardError(f"group {g}, trajectory {j}: a trajectory needs at least one turn")
        if group_sizes.size and group_sizes.min() < 1:
            raise RewardError(f"group {int(np.argmin(group_sizes >= 1))}: a group needs at least one trajectory")
        if group_sizes.sum() != lengths.size:
            raise RewardError(
                f"group_sizes sum to {group_sizes.sum()} trajectories but lengths describe {lengths.size}"
            )
        if lengths.sum() != rewards.size:
            raise RewardError(f"lengths sum to {lengths.sum()} turns but rewards hold {rewards.size}")
        finite = np.isfinite(rewards)
        if not finite.all():
            at = int(np.argmin(finite))
            raise RewardError(f"{self.where(at)}: reward {float(rewards[at])!r} is not finite")
        if self.states is not None:
            states = np.ascontiguousarray(self.states, dtype=np.int64)
            if states.shape != rewards.shape:
                raise RewardError(f"states must hold one id per turn ({rewards.size}), got shape {states.shape}")
            if states.size and states.min() < -1:
                raise RewardError(f"states are ids >= 0, or -1 for none; got {int(states.min())}")
            object.__setattr__(self, "states", states)

    # -- construction and splitting -------------------------------------------------------

    @classmethod
    def from_groups(
        cls,
        groups: Sequence[Sequence[Sequence[float]]],
        states: Sequence[Sequence[Sequence[Hashable | None]]] | None = None,
    ) -> RaggedBatch:
        """Build from nested lists: ``groups[g][j][t]`` is turn t of trajectory j of group g;
        ``states[g][j][t]``, when given, is that turn's anchor state (any hashable key, None for
        none), numbered in order of first appearance."""
        group_sizes = list(map(len, groups))
        lengths = list(map(len, chain.from_iterable(groups)))
        try:
            rewards = np.fromiter(chain.from_iterable(chain.from_iterable(groups)), np.float64, sum(lengths))
            return cls(
                rewards,
                np.array(lengths, dtype=np.int64),
                np.array(group_sizes, dtype=np.int64),
                None if states is None else cls._state_ids(states, lengths),
            )
        except (TypeError, ValueError):
            # numpy reads some non-numbers (None) as NaN: name a value float() refuses first.
            cls._raise_bad_value(groups)
            raise

    @staticmethod
    def _state_ids(states: Sequence[Sequence[Sequence[Hashable | None]]], lengths: list[int]) -> np.ndarray:
        rows = list(chain.from_iterable(states))
        if list(map(len, rows)) != lengths:
            raise RewardError(f"states give turns per trajectory {list(map(len, rows))}, rewards {lengths}")
        ids: dict[Hashable, int] = {}
        return np.array(
            [-1 if key is None else ids.setdefault(key, len(ids)) for key in chain.from_iterable(rows)], dtype=np.int64
        )

    @staticmethod
    def _raise_bad_value(groups: Sequence[Sequence[Sequence[float]]]) -> None:
        for g, group in enumerate(groups):
            for j, trajectory in enumerate(group):
                for t, r in enumerate(trajectory):
                    try:
                        float(r)
                    except (TypeError, ValueError):
                        raise RewardError(
                            f"group {g}, trajectory {j}, turn {t}: reward {r!r} is not a number"
                        ) from None

    def split(self, per_turn: np.ndarray) -> list[list[list[float]]]:
        """Cut a flat per-turn array back into ``groups[g][j][t]`` nested lists."""
        values = per_turn.tolist()
        lengths = self.lengths.tolist()
        trajectories = [values[end - n : end] for end, n in zip(accumulate(lengths), lengths)]
        sizes = self.group_sizes.tolist()
        return [trajectories[end - n : end] for end, n in zip(accumulate(sizes), sizes)]

    # -- sizes ------------------------------------------------------------------------------

    @property
    def n_turns(self) -> int:
        return int(self.rewards.size)

    @property
    def n_trajectories(self) -> int:
        return int(self.lengths.size)

    @property
    def n_groups(self) -> int:
        return int(self.group_sizes.size)

    # -- derived index arrays ---------------------------------------------------------------

    @cached_property
    def trajectory_ends(self) -> np.ndarray:
        """(n_traj,) one past the last turn of each trajectory in the flat layout."""
        return self.lengths.cumsum()

    @cached_property
    def trajectory_starts(self) -> np.ndarray:
        """(n_traj,) flat index of each trajectory's first turn."""
        return self.trajectory_ends - self.lengths

    @cached_property
    def turn_index(self) -> np.ndarray:
        """(n_turns,) position t of each turn inside its trajectory, from 0."""
        return np.arange(self.n_turns) - self.trajectory_starts.repeat(self.lengths)

    @cached_property
    def group_turns(self) -> np.ndarray:
        """(n_groups,) turns per group, summed over its trajectories."""
        return np.add.reduceat(self.lengths, self.group_starts) if self.n_groups else self.lengths[:0]

    @cached_property
    def group_starts(self) -> np.ndarray:
        """(n_groups,) index of each group's first trajectory."""
        return self.group_sizes.cumsum() - self.group_sizes

    @cached_property
    def group_longest(self) -> np.ndarray:
        """(n_groups,) turns of each group's longest trajectory."""
        return np.maximum.reduceat(self.lengths, self.group_starts) if self.n_groups else self.lengths[:0]

    @cached_property
    def group_turn_starts(self) -> np.ndarray:
        """(n_groups,) flat index of each group's first turn."""
        return self.group_turns.cumsum() - self.group_turns

    @cached_property
    def group_of_trajectory(self) -> np.ndarray:
        """(n_traj,) group index of each trajectory."""
        return np.repeat(np.arange(self.n_groups), self.group_sizes)

    @cached_property
    def trajectory_in_group(self) -> np.ndarray:
        """(n_traj,) position of each trajectory inside its group, from 0."""
        return np.arange(self.n_trajectories) - self.group_starts.repeat(self.group_sizes)

    @cached_property
    def group_of_turn(self) -> np.ndarray:
        """(n_turns,) group index of each turn."""
        return np.repeat(np.arange(self.n_groups), self.group_turns)

    # -- locating a flat index --------------------------------------------------------------

    def _locate_trajectory(self, trajectory: int) -> tuple[int, int]:
        group_ends = np.cumsum(self.group_sizes)
        g = int(np.searchsorted(group_ends, trajectory, side="right"))
        return g, trajectory - int(group_ends[g] - self.group_sizes[g])

    def where(self, turn: int) -> str:
        """``group g, trajectory j, turn t`` of flat index ``turn``, for error messages."""
        ends = np.cumsum(self.lengths)
        trajectory = int(np.searchsorted(ends, turn, side="right"))
        g, j = self._locate_trajectory(trajectory)
        return f"group {g}, trajectory {j}, turn {turn - int(ends[trajectory] - self.lengths[trajectory])}"

"""Hypothesis strategies shared by the math tests."""

from __future__ import annotations

from hypothesis import strategies as st

# Rewards of any sign; magnitudes where a float64 reference is itself trustworthy.
reward = st.floats(min_value=-1e3, max_value=1e3, allow_nan=False, allow_infinity=False)
nonnegative_reward = st.floats(min_value=0.0, max_value=1e3, allow_nan=False, allow_infinity=False)
gamma = st.one_of(st.sampled_from([0.0, 0.4, 0.8, 0.9, 1.0]), st.floats(min_value=0.0, max_value=1.0))
aggregation = st.sampled_from(["sum", "max", "mean"])
baseline = st.sampled_from(["pooled", "per_turn", "absorbing", "leave_one_out", "trajectory"])
scale = st.sampled_from(["std", "none"])


def trajectory(elements=reward, max_turns: int = 12):
    return st.lists(elements, min_size=1, max_size=max_turns)


def group(elements=reward, max_size: int = 8, max_turns: int = 8):
    return st.lists(trajectory(elements, max_turns), min_size=1, max_size=max_size)


def groups(elements=reward, max_groups: int = 5):
    return st.lists(group(elements), min_size=1, max_size=max_groups)


def close(a: float, b: float, scale: float) -> bool:
    """Equal up to float64 rounding relative to ``scale`` (the magnitudes that were summed)."""
    return abs(a - b) <= 1e-9 * max(1.0, scale)


# Anchor states: a few keys of two kinds so that states recur, None for a turn without one.
state = st.one_of(st.none(), st.sampled_from(["a", "b", "c"]), st.integers(0, 2))


def group_with_states(elements=reward, max_size: int = 8, max_turns: int = 8):
    """(group, states): per-turn rewards and, of the same shape, per-turn anchor states."""
    return group(elements, max_size, max_turns).flatmap(
        lambda g: st.tuples(st.just(g), st.tuples(*(st.lists(state, min_size=len(t), max_size=len(t)) for t in g)))
    )

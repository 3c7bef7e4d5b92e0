"""DAPO overlong reward shaping (docs/properties.md "DAPO reward shaping")."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError
from stepwise_dapo_math.config import OverlongConfig
from stepwise_dapo_math.shaping import overlong_penalty


@st.composite
def limits(draw, min_cache: int = 0):
    max_tokens = draw(st.integers(min_value=max(1, min_cache), max_value=100_000))
    cache_tokens = draw(st.integers(min_value=min_cache, max_value=max_tokens))
    return max_tokens, cache_tokens


lengths = st.integers(min_value=0, max_value=200_000)


@given(limits(), lengths)
def test_matches_the_dapo_formula(limit, length):
    max_tokens, cache_tokens = limit
    start = max_tokens - cache_tokens
    value = overlong_penalty(length, max_tokens, cache_tokens)
    if length <= start:
        assert value == 0.0
    elif length <= max_tokens:
        assert value == pytest.approx((start - length) / cache_tokens)
    else:
        assert value == -1.0
    assert -1.0 <= value <= 0.0


@given(limits(min_cache=1))
def test_continuous_at_both_break_points(limit):
    max_tokens, cache_tokens = limit
    start = max_tokens - cache_tokens
    step = 1 / cache_tokens  # one token moves the ramp by exactly this
    assert overlong_penalty(start, max_tokens, cache_tokens) == 0.0
    assert overlong_penalty(start + 1, max_tokens, cache_tokens) == pytest.approx(-step)
    assert overlong_penalty(max_tokens, max_tokens, cache_tokens) == pytest.approx(-1.0)
    assert overlong_penalty(max_tokens - 1, max_tokens, cache_tokens) == pytest.approx(-1 + step)
    assert overlong_penalty(max_tokens + 1, max_tokens, cache_tokens) == -1.0


@given(limits(), lengths, lengths)
def test_non_increasing_in_length(limit, a, b):
    short, long = sorted((a, b))
    assert overlong_penalty(short, *limit) >= overlong_penalty(long, *limit)


@given(st.integers(min_value=1, max_value=100_000), lengths)
def test_no_cache_is_a_hard_cut(max_tokens, length):
    assert overlong_penalty(length, max_tokens, 0) == (0.0 if length <= max_tokens else -1.0)


def test_dapo_defaults():
    config = OverlongConfig()
    assert (config.enabled, config.max_tokens, config.cache_tokens) == (False, 20480, 4096)
    assert overlong_penalty(16384, 20480, 4096) == 0.0
    assert overlong_penalty(18432, 20480, 4096) == -0.5


@pytest.mark.parametrize(
    ("args", "message"),
    [((-1, 10, 5), "length"), ((5, 10, 11), "cache_tokens"), ((5, 10, -1), "cache_tokens")],
)
def test_bad_arguments_are_named(args, message):
    with pytest.raises(ValueError, match=message):
        overlong_penalty(*args)


def test_config_rejects_a_cache_longer_than_the_maximum():
    with pytest.raises(ValidationError, match="cache_tokens"):
        OverlongConfig(max_tokens=100, cache_tokens=101)
    with pytest.raises(ValidationError, match="max_tokens"):
        OverlongConfig(max_tokens=0)

"""The absorbing per-turn baseline is unbiased when the policy chooses when to stop; per_turn is not.

Task built for it (exact, no sampling): one prompt, up to T turns; at turn t the policy
continues with probability p_t = σ(θ_t) (reward ``a``, the cost or gain of another turn) or
stops (reward ``s``, the submitted answer's score); after T continues the episode ends. The
policy has one logit per turn, so a baseline that weights turns unevenly bends the update.

For every G-tuple of trajectories (enumerated with its probability) the estimator's update
Σ_j Σ_t A_{j,t} ∇_θ log π(a_{j,t}) is summed; its expectation divided by G is compared with
the true gradient ∇J of J = E[Σ_t r_t]. For the absorbing baseline with γ = 1, "sum" returns
and scale "none" it is exactly (G − 1)/G · ∇J (baselines.py derives why); per_turn's is not a
multiple of ∇J: its turn-t set holds only the trajectories that chose to reach turn t.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from verifiers_stepwise import get_estimator

T, G = 3, 3


def paths(a: float, s: float) -> list[tuple[list[bool], list[float]]]:
    """(continued at each turn, rewards): k continues then a stop, for k < T, or T continues."""
    stopped = [([True] * k + [False], [a] * k + [s]) for k in range(T)]
    return [*stopped, ([True] * T, [a] * T)]


def expected_update(estimator, a: float, s: float, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(true ∇J, E[update] / G), both (T,), for continue probabilities ``p`` (T,)."""
    options = paths(a, s)
    prob = [math.prod(p[t] if c else 1 - p[t] for t, c in enumerate(acts)) for acts, _ in options]

    def score(acts: list[bool], weights: list[float]) -> np.ndarray:
        g = np.zeros(T)
        for t, (c, w) in enumerate(zip(acts, weights)):
            g[t] += w * ((1 - p[t]) if c else -p[t])
        return g

    true = sum(q * sum(r) * score(acts, [1.0] * len(acts)) for q, (acts, r) in zip(prob, options))
    update = np.zeros(T)
    for combo in itertools.product(range(len(options)), repeat=G):
        q = math.prod(prob[i] for i in combo)
        advantages = estimator([options[i][1] for i in combo])
        for i, adv in zip(combo, advantages):
            update += q * score(options[i][0], adv)
    return true, update / G


@pytest.mark.parametrize(("a", "s"), [(-0.5, 1.0), (0.5, 0.0), (0.3, 1.0)])
@pytest.mark.parametrize("p", [(0.3, 0.5, 0.7), (0.8, 0.2, 0.5)])
def test_absorbing_baseline_is_unbiased_under_policy_stopping(a, s, p):
    true, update = expected_update(
        get_estimator("stepwise", baseline="absorbing", gamma=1.0, scale="none"), a, s, np.array(p)
    )
    assert update == pytest.approx((G - 1) / G * true, rel=1e-12, abs=1e-15)


def test_per_turn_baseline_is_biased_under_policy_stopping():
    true, update = expected_update(
        get_estimator("stepwise", baseline="per_turn", gamma=1.0, scale="none"), -0.5, 1.0, np.array([0.3, 0.5, 0.7])
    )
    ratio = update / true
    # a different factor per turn: later turns are shrunk by how rarely the others get there
    assert ratio.max() - ratio.min() > 0.05
    assert ratio[0] == pytest.approx((G - 1) / G)  # turn 0: every trajectory is in the set

"""The ``gigpo`` estimator: GRPO's episode advantage plus a step advantage among anchor states.

Group-in-Group Policy Optimization (Feng et al. 2025, arXiv 2505.10978): turns of a group that
act from the same environment state (an *anchor state*) form a step group, and each turn's
discounted return is compared with the others of its step group. The anchor states come from
the env (``StepwiseMultiTurnEnv.turn_state``, recorded as ``trace.info["turn_states"]``) and
reach the math as ``RaggedBatch.states``.

Checked against the GiGPO authors' verl-agent code (``gigpo/core_gigpo.py`` as in
langfengQ/DrMAS at 3b556f2: ``compute_gigpo_outcome_advantage``, ``episode_norm_reward``,
``build_step_group``, ``step_norm_reward``, ``compute_step_discounted_returns``): the episode
score is the undiscounted sum of rewards, step groups are exact matches of the anchor
observation within one episode group (turns of one trajectory included), step returns are
discounted by γ over env steps, ε = 1e-6 is added to the std, and the two are combined as
A^E + ω A^S. Where this one differs, it keeps the conventions of this package: population std
(verl-agent's ``torch.std`` is the sample std, ddof = 1) and a group with a single trajectory
gets 0 (verl-agent gives a lone episode its raw score).
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from verifiers_stepwise.errors import RewardError
from verifiers_stepwise.estimators.baselines import Scale, normalize_segments
from verifiers_stepwise.estimators.grpo import GRPO, GRPOConfig
from verifiers_stepwise.estimators.ragged import RaggedBatch
from verifiers_stepwise.estimators.returns import Gamma, ragged_discounted_returns

__all__ = ["GiGPO", "GiGPOConfig", "anchor_state_advantages"]


class GiGPOConfig(GRPOConfig):
    gamma: Gamma = 0.95
    """Discount γ of the step returns (the paper's 0.95); the episode score is undiscounted."""
    omega: float = Field(1.0, ge=0.0, allow_inf_nan=False)
    """Weight ω of the step advantage (the paper's 1); 0 is exactly ``grpo``."""


class GiGPO(GRPO):
    """Group-in-Group Policy Optimization (arXiv 2505.10978, eqs. 3 and 5-8).

    For trajectory j of a group, turn t with reward r_{j,t} and anchor state s_{j,t}:

        A^E_j     = (G_j − mean_k G_k) / (std_k G_k + ε),     G_j = Σ_t r_{j,t}      (episode; grpo)
        R_{j,t}   = Σ_{i≥t} γ^(i−t) r_{j,i}                                           (step return)
        S_{j,t}   = {(k, u) in the group : s_{k,u} = s_{j,t}}                         (step group)
        A^S_{j,t} = (R_{j,t} − mean_{S_{j,t}} R) / (std_{S_{j,t}} R + ε)              (0 if no state)
        A_{j,t}   = A^E_j + ω A^S_{j,t}

    with scale="none" dropping both divisions (mean-only, GiGPO's "mean_norm"). A turn whose
    state occurs once in the group, or that has none, has A^S = 0; so when no state recurs
    GiGPO is ``grpo`` exactly.

    Known biases (a state revisited within a rollout compares positions; A^S discounted, A^E
    not): docs/estimators.md, "Known biases".
    """

    Config = GiGPOConfig
    config: GiGPOConfig

    def batched(self, batch: RaggedBatch) -> np.ndarray:
        c = self.config
        episode = super().batched(batch)  # A^E_j
        if batch.states is None or c.omega == 0.0:
            return episode  # no anchor states: A^S = 0
        returns = ragged_discounted_returns(batch, c.gamma, "sum")  # R_{j,t}
        step = anchor_state_advantages(batch, returns, c.scale, c.eps)  # A^S_{j,t}
        with np.errstate(over="ignore"):
            advantages = episode + c.omega * step  # A_{j,t}
        finite = np.isfinite(advantages)
        if not finite.all():
            raise RewardError(f"{batch.where(int(np.argmin(finite)))}: the advantage overflows float64")
        return advantages


def anchor_state_advantages(batch: RaggedBatch, returns: np.ndarray, scale: Scale, eps: float) -> np.ndarray:
    """(n_turns,) A^S: each turn's return against its step group S (``GiGPO``), 0 for a turn
    without a state, alone in its step group, or in a group of one trajectory.

    Sorts the turns that have a state by (group, state), so each step group is one contiguous
    segment, normalizes every segment and puts the values back.
    """
    advantages = np.zeros_like(returns)
    if batch.states is None:
        return advantages
    anchored = np.flatnonzero(batch.states >= 0)
    group, state = batch.group_of_turn[anchored], batch.states[anchored]
    order = np.lexsort((state, group))  # by group, then by state within it
    cells, group, state = anchored[order], group[order], state[order]
    first = np.flatnonzero(np.r_[True, (group[1:] != group[:-1]) | (state[1:] != state[:-1])])
    sizes = np.diff(np.r_[first, cells.size])  # |S| of each step group
    advantages[cells] = normalize_segments(returns[cells], sizes, scale, eps)
    advantages[np.repeat(batch.group_sizes == 1, batch.group_turns)] = 0.0
    return advantages

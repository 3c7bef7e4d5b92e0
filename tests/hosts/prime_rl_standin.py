"""The two prime-rl base classes the adapter subclasses, for when prime-rl is not installed.

prime-rl is git-only (not on PyPI), so a fresh environment has no ``prime_rl``. These
stand-ins mirror what ``verifiers_stepwise.hosts.prime_rl`` uses of prime-rl 559b447 and
nothing more: ``prime_rl.configs.algorithm.BaseAlgoConfig`` (a pydantic config that forbids
unknown fields, with the ``action_loss_type`` class variable) and
``prime_rl.orchestrator.algo.base.Algorithm`` (``__init__(config, policy_pool)``,
``score_group``, and ``finalize_group`` calling it). Registration into prime-rl's algorithm
union is only tested against the real prime-rl.
"""

from __future__ import annotations

import sys
import types
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict

ActionLossType = Literal["rl", "ce", "ref_kl"]


class BaseAlgoConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    action_loss_type: ClassVar[ActionLossType] = "rl"


class Algorithm:
    action_loss_type: ClassVar[ActionLossType] = "rl"

    def __init__(self, config, policy_pool):
        self.policy_pool = policy_pool
        self.connected_pools = []

    async def score_group(self, episodes) -> None:
        """Assign group-relative annotations to a finalized cohort."""

    async def finalize_group(self, episodes) -> None:
        await self.score_group(episodes)


def install() -> None:
    modules = {
        name: types.ModuleType(name)
        for name in (
            "prime_rl",
            "prime_rl.configs",
            "prime_rl.configs.algorithm",
            "prime_rl.orchestrator",
            "prime_rl.orchestrator.algo",
            "prime_rl.orchestrator.algo.base",
        )
    }
    modules["prime_rl.configs.algorithm"].ActionLossType = ActionLossType
    modules["prime_rl.configs.algorithm"].BaseAlgoConfig = BaseAlgoConfig
    modules["prime_rl.orchestrator.algo.base"].Algorithm = Algorithm
    for name, module in modules.items():
        module.__path__ = []  # packages, so the submodules resolve
        sys.modules[name] = module

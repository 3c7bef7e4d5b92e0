"""Stand-in: torchtitan main's ``torchtitan.rl.rollout.types`` as torchtitan 0.3.0's
``torchtitan.experiments.rl.rollout.types`` (the same classes), except ``Rollout``: main's has a
``logs`` field (a dict, which the stored rollouter fills), 0.3.0's does not."""

from dataclasses import dataclass, field
from typing import Any

from torchtitan.experiments.rl.rollout.types import GenerateFn, RolloutGroup, RolloutStatus, RolloutTurn
from torchtitan.experiments.rl.rollout.types import Rollout as _Rollout

__all__ = ["GenerateFn", "Rollout", "RolloutGroup", "RolloutStatus", "RolloutTurn"]


@dataclass(kw_only=True, slots=True)
class Rollout(_Rollout):
    logs: dict[str, Any] = field(default_factory=dict)

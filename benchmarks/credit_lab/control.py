"""The single-turn control: with one turn per episode every estimator should give the same
advantages as the reference, so training with it must give the same learning curve.

Advantages are compared on batches sampled from the uniform starting policy, laid out exactly
as training lays them out (``train.turn_advantages``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from credit_lab.policy import TabularPolicy, rollout
from credit_lab.tasks import Task
from credit_lab.train import TrainConfig, draw_prompts, turn_advantages
from verifiers_stepwise import Estimator

__all__ = ["Agreement", "compare_advantages"]


@dataclass(frozen=True)
class Agreement:
    identical: bool
    """Bit-for-bit equal to the reference's advantages on every batch."""
    scale: float | None
    """c when the advantages are c × the reference's on every batch (to 1e-12), else None."""


def compare_advantages(
    task: Task, reference: Estimator, other: Estimator, config: TrainConfig, batches: int = 16
) -> Agreement:
    generator = torch.Generator().manual_seed(config.seed)
    policy = TabularPolicy(task)
    ref, oth = [], []
    for _ in range(batches):
        batch = rollout(task, policy, draw_prompts(task, config, generator), generator)
        ref.append(turn_advantages(reference, batch.rewards, config.group_size, batch.lengths, batch.states).numpy())
        oth.append(turn_advantages(other, batch.rewards, config.group_size, batch.lengths, batch.states).numpy())
    a, b = np.concatenate(ref).ravel(), np.concatenate(oth).ravel()
    if np.array_equal(a, b):
        return Agreement(True, 1.0)
    nonzero = a != 0
    if not nonzero.any() or np.any(b[~nonzero] != 0):
        return Agreement(False, None)
    ratios = b[nonzero] / a[nonzero]
    scale = float(np.median(ratios))
    return Agreement(False, scale if np.allclose(ratios, scale, rtol=1e-12, atol=0) else None)

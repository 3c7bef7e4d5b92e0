"""TRL host: ``GRPOTrainer`` on verifiers episodes with stepwise credit (``pip install '.[trl]'``).

    trainer     StepwiseGRPOTrainer: the GRPOTrainer subclass (episodes → records → TRL's loss)
    rollout     an episode and its credit record → a TRL sample (ids, env mask, per-token advantages)
    cli         ``python -m verifiers_stepwise.hosts.trl``: a blueprint (the checked command line) and main
    inference   the in-process inference that plays the episodes with the trainer's own model

``from verifiers_stepwise.hosts.trl import StepwiseGRPOTrainer`` imports the trainer (and TRL)
on first use. Checked against TRL 1.16.0, transformers 5.24.0, peft 0.21.2, verifiers 0.4.0,
renderers 0.1.12.
"""

from __future__ import annotations

from typing import Any

__all__ = ["StepwiseGRPOTrainer"]


def __getattr__(name: str) -> Any:
    if name == "StepwiseGRPOTrainer":
        from verifiers_stepwise.hosts.trl.trainer import StepwiseGRPOTrainer

        return StepwiseGRPOTrainer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

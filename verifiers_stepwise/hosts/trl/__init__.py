"""TRL host: ``GRPOTrainer`` on verifiers episodes with stepwise credit (``pip install '.[trl]'``).

    trainer     StepwiseGRPOTrainer: the GRPOTrainer subclass, its rollout function and metrics
    rollout     episodes → TRL samples (prompt/completion ids, env mask, per-token advantages)
    endpoint    BatchingTokenEndpoint: the token endpoint, one batch per turn of the episodes in flight
    sampling    ModelSampler: the trainer's model answering the token endpoint
    renderer    TextRenderer (plain text, for base models) and TurnFormatRenderer (Gemma's turns)
    model       the default policy, Gemma 3 270M from the PyPI GGUF (extra [trl-model])
    cli         ``python -m verifiers_stepwise.hosts.trl`` (TRL's argument parser)

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

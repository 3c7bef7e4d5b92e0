"""Stand-in: ``SamplingConfig`` of torchtitan main's ``torchtitan.rl.generator``, with the fields
the stored generation server sets (0.3.0's, in ``actors.generator``, imports vLLM)."""

from dataclasses import dataclass


@dataclass(kw_only=True)
class SamplingConfig:
    temperature: float = 0.8
    top_p: float = 0.95
    max_tokens: int = 100
    seed: int | None = None
    stop_token_ids: list[int] | None = None

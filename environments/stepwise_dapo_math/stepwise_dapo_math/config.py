"""Configs of the DAPO-math bundle: what loads (``--env.taskset.*``) and how it is scored
(``--env.taskset.task.*``). Checked against verifiers 0.4.0 (``vf.TasksetConfig``,
``vf.TaskConfig``, ``vf.BaseConfig`` — pydantic, unknown fields rejected)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import verifiers.v1 as vf
from pydantic import Field, model_validator

__all__ = [
    "DapoMathTaskConfig",
    "DapoMathTasksetConfig",
    "MathVerifyConfig",
    "OverlongConfig",
]


class OverlongConfig(vf.BaseConfig):
    """DAPO's soft overlong punishment, its own reward term ``overlong_penalty`` (off by
    default); see :mod:`stepwise_dapo_math.shaping`."""

    enabled: bool = False
    max_tokens: int = Field(20480, gt=0)
    """L_max: a response longer than this gets −1."""
    cache_tokens: int = Field(4096, ge=0)
    """L_cache: the interval before L_max over which the penalty ramps from 0 to −1."""
    tokenizer: str | None = None
    """The model's tokenizer (a Hugging Face name or a local directory), to count a response's
    tokens from its text (reasoning included) when the trace has neither sampled tokens nor the
    provider's usage; loaded before the episodes run (see :mod:`stepwise_dapo_math.tokens`)."""

    @model_validator(mode="after")
    def _cache_within_max(self) -> OverlongConfig:
        if self.cache_tokens > self.max_tokens:
            raise ValueError(
                f"overlong.cache_tokens ({self.cache_tokens}) must not exceed overlong.max_tokens ({self.max_tokens})"
            )
        return self


class MathVerifyConfig(vf.BaseConfig):
    """The bounded math-verify path (``verifier = "math_verify"``)."""

    timeout_s: float = Field(5.0, gt=0)
    """Worker time one check may take; past it the worker is killed and the answer is wrong."""
    workers: int = Field(2, ge=1)
    """Worker processes shared by every task of the run."""


class DapoMathTaskConfig(vf.TaskConfig):
    """How a response is scored."""

    verifier: Literal["integer", "math_verify"] = "integer"
    """``integer``: DAPO's exact integer match. ``math_verify``: symbolic equivalence (for
    ground truths such as ``\\frac{1}{2}``), bounded in time."""
    correct_reward: float = Field(1.0, allow_inf_nan=False)
    incorrect_reward: float = Field(-1.0, allow_inf_nan=False)
    """DAPO scores a wrong or missing answer −1; set 0 for a 1/0 reward. Both finite: a
    non-finite reward would fail every episode it is given to, after the model answered."""
    boxed_fallback: bool = True
    """Use the last ``\\boxed{}`` when a response has no ``Answer:`` line."""
    overlong: OverlongConfig = OverlongConfig()
    math_verify: MathVerifyConfig = MathVerifyConfig()

    @model_validator(mode="after")
    def _correct_pays_more(self) -> DapoMathTaskConfig:
        if not self.correct_reward > self.incorrect_reward:
            raise ValueError(
                f"correct_reward ({self.correct_reward}) must be greater than "
                f"incorrect_reward ({self.incorrect_reward})"
            )
        return self


class DapoMathTasksetConfig(vf.TasksetConfig):
    """Which problems load. Selection is deterministic: file/hub order, then ``split``, then
    de-duplication, then a ``seed``-ed shuffle (if ``shuffle``), then ``limit``."""

    task: DapoMathTaskConfig = DapoMathTaskConfig()
    dataset: str = "dapo-math-17k"
    """A preset (``dapo-math-17k``, ``aime-2024``, ``aime-2025``, ``aime-2022-2024``), ``bundled``
    (the offline set shipped with this package), or any Hugging Face dataset id."""
    path: Path | None = None
    """A local ``.jsonl``/``.json``/``.parquet`` file; when set, ``dataset`` is ignored."""
    subset: str | None = None
    """Hugging Face config name."""
    split: str | None = None
    """Hugging Face split (default: the preset's, else ``train``). For files and the bundled
    set: keep only rows whose ``split`` (or ``extra_info.split``) equals it."""
    problem_key: str | None = None
    """Column holding the bare problem (dotted for nested fields). Default: a ``prompt``
    column is used as the full user message; else ``problem`` or ``question`` is wrapped in the
    DAPO template."""
    answer_key: str | None = None
    """Column holding the ground truth. Default: ``reward_model.ground_truth``, ``answer``,
    ``ground_truth``, ``final_answer``."""
    offline_fallback: bool = True
    """When the hub cannot be reached (offline mode, no network) and the *default* dataset is not
    in the local cache, load the bundled set (its ``train`` split) with a warning on stderr
    instead of failing. A dataset named with ``dataset`` is never replaced: that is an error."""
    dedupe: bool = True
    """Keep the first row of each problem id (DAPO-Math-17k repeats each problem ~100 times)."""
    shuffle: bool = False
    seed: int = 0
    limit: int | None = Field(None, ge=1)

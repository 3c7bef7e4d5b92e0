"""A response's token count from its text, for overlong shaping when the trace carries neither
sampled tokens nor the provider's usage (a server that sends no usage in its stream).

``overlong.tokenizer`` names the model's tokenizer: a Hugging Face name or a local directory,
loaded with transformers' ``AutoTokenizer`` (installed with verifiers, whose ``renderers``
dependency requires it), imported on first use and loaded once per process and name. The
taskset loads it before any episode runs, so a name that cannot be loaded stops the run at
once. Checked against transformers 5.x (``AutoTokenizer.from_pretrained``, ``encode``).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

__all__ = ["TokenizerError", "count_tokens", "load_tokenizer"]


class TokenizerError(ValueError):
    """``overlong.tokenizer`` names no tokenizer that can be loaded here."""


@functools.cache
def load_tokenizer(name: str) -> Any:
    """The tokenizer ``name`` (a Hugging Face name or a local directory)."""
    if name.startswith(("/", ".", "~")) and not Path(name).expanduser().is_dir():
        raise TokenizerError(f"overlong.tokenizer {name!r}: no such directory")
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(name)
    except (OSError, ValueError) as error:
        raise TokenizerError(
            f"overlong.tokenizer {name!r} cannot be loaded ({type(error).__name__}: {error}); give a local "
            "directory with the model's tokenizer files (tokenizer.json, tokenizer_config.json) or a Hugging Face "
            "name that is in the local cache (or reachable, with HF_HUB_OFFLINE unset)"
        ) from error


def count_tokens(name: str, *texts: str | None) -> int:
    """Tokens of ``texts`` (each encoded on its own, without special tokens) under ``name``."""
    tokenizer = load_tokenizer(name)
    return sum(len(tokenizer.encode(text, add_special_tokens=False)) for text in texts if text)

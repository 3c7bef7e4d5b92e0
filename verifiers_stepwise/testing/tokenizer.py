"""A byte-level tokenizer with Qwen3's special tokens, written to a directory, for tests.

    path = qwen3_byte_tokenizer(tmp_path / "tokenizer")
    AutoTokenizer.from_pretrained(path)   # what renderers' ``load_tokenizer`` does

Every byte is one token (ids 0-255, GPT-2's byte-to-unicode alphabet, no merges), so any text
encodes and decodes exactly and a reply of n bytes is n tokens; Qwen3's chat and tool tokens
follow as special tokens. ``renderers.Qwen3Renderer`` renders with it as with Qwen3's own
tokenizer (same template logic, different ids), which is what the token-level train client of
verifiers needs when no model files can be downloaded.
"""

from __future__ import annotations

from pathlib import Path

from verifiers_stepwise.extras import requires

__all__ = ["QWEN3_SPECIAL_TOKENS", "qwen3_byte_tokenizer"]

QWEN3_SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
)


def qwen3_byte_tokenizer(path: str | Path) -> str:
    """Write the tokenizer to ``path`` (created if needed) and return it as a string."""
    with requires("verifiers_stepwise.testing.tokenizer", "tokenizers", "transformers", extra="torchtitan"):
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers
        from transformers import PreTrainedTokenizerFast
        from transformers.convert_slow_tokenizer import bytes_to_unicode

    vocab = {symbol: byte for byte, symbol in bytes_to_unicode().items()}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=list(QWEN3_SPECIAL_TOKENS),
    )
    Path(path).mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(path))
    return str(path)

"""A tiny causal LM and tokenizer built offline, for tests of the TRL host (no hub, no download).

``tiny_tokenizer()`` is a byte-level BPE (any text encodes and every id decodes) trained on a
few lines, with Gemma's turn tokens as special tokens so ``TurnFormatRenderer`` accepts it.
``tiny_model(tokenizer)`` is a randomly initialized two-layer Llama over that vocabulary.
"""

from __future__ import annotations

from typing import Any

from verifiers_stepwise.extras import requires

__all__ = ["tiny_model", "tiny_tokenizer"]

_CORPUS = [
    "Compute 17 * 23. End your reply with the number.",
    "Your answer scored 0.50; 1.00 counts as solved. Check your work and give an improved answer.",
    "user\nmodel\n The answer is 391. 0123456789 + - * / = ( )",
]


def tiny_tokenizer() -> Any:
    with requires("verifiers_stepwise.testing.tiny_lm", "tokenizers", "transformers", extra="trl"):
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
        from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=["<pad>", "<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(_CORPUS, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="<pad>",
        bos_token="<bos>",
        eos_token="<eos>",
        additional_special_tokens=["<start_of_turn>", "<end_of_turn>"],
    )


def tiny_model(tokenizer: Any, **config: Any) -> Any:
    """A 2-layer Llama for ``tokenizer``; ``config`` overrides ``LlamaConfig`` fields (``attention_bias=True``)."""
    with requires("verifiers_stepwise.testing.tiny_lm", "torch", "transformers", extra="trl"):
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    llama = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **config,
    )
    return LlamaForCausalLM(llama)

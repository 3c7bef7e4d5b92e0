"""Sampling from a transformers causal LM, as the token endpoint's generator.

``ModelSampler(get_model, pad_token_id)`` answers a batch of ``GenerateRequest``\\ s with the
model ``get_model()`` returns at that moment (the trainer's current weights): requests that
share sampling settings are left-padded into one ``model.generate`` call. Each request is then
cut at its own first stop token (kept, ``finish_reason="stop"``) or at its own ``max_tokens``
(``"length"``).

Logprobs are those of the sampled token under ``softmax(logits / temperature)`` of the raw
logits (no top-p renormalization) — the quantity TRL's ``GRPOTrainer`` recomputes as the old
policy's logprobs, so the two agree up to numerics when top_p is 1. Greedy requests
(temperature 0) report ``log_softmax(logits)``.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from typing import Any, Literal, cast

from verifiers_stepwise.extras import requires

with requires("verifiers_stepwise.hosts.trl", "torch", extra="trl"):
    import torch

from verifiers_stepwise.hosts.token_endpoint import GenerateRequest, Generation

__all__ = ["ModelSampler"]


class ModelSampler:
    def __init__(self, get_model: Callable[[], Any], pad_token_id: int, *, max_new_tokens: int = 256) -> None:
        self.get_model = get_model
        self.pad_token_id = pad_token_id
        self.max_new_tokens = max_new_tokens
        """Cap for requests without ``max_tokens``."""
        self._lock = threading.Lock()

    def __call__(self, requests: Sequence[GenerateRequest]) -> list[Generation]:
        out: list[Generation | None] = [None] * len(requests)
        key = lambda i: (requests[i].temperature, requests[i].top_p, requests[i].seed)  # noqa: E731
        with self._lock, torch.no_grad():
            for _, group in itertools.groupby(sorted(range(len(requests)), key=key), key=key):
                indices = list(group)
                for i, generation in zip(indices, self._sample([requests[i] for i in indices])):
                    out[i] = generation
        assert all(g is not None for g in out)  # every request belongs to exactly one group
        return cast(list[Generation], out)

    def _sample(self, requests: list[GenerateRequest]) -> list[Generation]:
        model = self.get_model()
        device = next(model.parameters()).device
        first = requests[0]
        width = max(len(r.prompt_ids) for r in requests)
        input_ids = torch.full((len(requests), width), self.pad_token_id, dtype=torch.long)
        attention = torch.zeros((len(requests), width), dtype=torch.long)
        for row, request in enumerate(requests):
            n = len(request.prompt_ids)
            input_ids[row, width - n :] = torch.tensor(request.prompt_ids)
            attention[row, width - n :] = 1
        limits = [r.max_tokens or self.max_new_tokens for r in requests]
        stops = sorted({t for r in requests for t in r.stop_token_ids})
        greedy = first.temperature == 0
        if first.seed is not None:
            torch.manual_seed(first.seed)
        was_training = model.training
        model.eval()
        try:
            result = model.generate(
                input_ids=input_ids.to(device),
                attention_mask=attention.to(device),
                max_new_tokens=max(limits),
                do_sample=not greedy,
                temperature=None if greedy else first.temperature,
                top_p=None if greedy else first.top_p,
                top_k=0 if not greedy else None,
                eos_token_id=stops or None,
                pad_token_id=self.pad_token_id,
                use_cache=True,
                output_logits=True,
                return_dict_in_generate=True,
            )
        finally:
            model.train(was_training)
        sampled = result.sequences[:, width:]
        logits = torch.stack(result.logits, dim=1).float()  # (batch, new tokens, vocab)
        scale = 1.0 if greedy else first.temperature
        logprobs = torch.log_softmax(logits / scale, dim=-1).gather(-1, sampled.unsqueeze(-1)).squeeze(-1)
        generations = []
        for row, (request, limit) in enumerate(zip(requests, limits)):
            tokens = sampled[row].tolist()
            end = next((k + 1 for k, t in enumerate(tokens[:limit]) if t in request.stop_token_ids), None)
            finish: Literal["stop", "length"] = "stop" if end is not None else "length"
            end = end if end is not None else min(limit, len(tokens))
            generations.append(Generation(tokens[:end], logprobs[row, :end].tolist(), finish))
        return generations

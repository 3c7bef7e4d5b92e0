"""Sampling from a transformers causal LM, as the token endpoint's generator.

``ModelSampler(get_model, pad_token_id)`` answers a batch of ``GenerateRequest``\\ s with the
model ``get_model()`` returns at that moment (the trainer's current weights): requests that
share sampling settings are left-padded into one ``model.generate`` call. Each request is then
cut at its own first stop token (kept, ``finish_reason="stop"``) or at its own ``max_tokens``
(``"length"``).

Logprobs are those of the sampled token under ``softmax(logits / temperature)`` of the raw
logits (no top-p renormalization) — the quantity TRL's ``GRPOTrainer`` recomputes as the old
policy's logprobs, so the two agree up to numerics when top_p is 1. Greedy requests
(temperature 0) report ``log_softmax(logits)``. They are read during sampling
(``SampledLogprobs``), one step's distribution at a time: generate's ``output_logits`` kept every
step's full-vocabulary logits (262k floats a token for Gemma, 2.9 s and 1 GB a step at 16
episodes × 32 tokens).

A PEFT model (LoRA) samples with its adapters merged (unmerged adapters made generation
1.5–1.7× slower), for the call or for every call inside ``with sampler.merged():``, which the
trainer holds over a step's rollouts. Each layer merges out of place (W + ΔW into a buffer of
its own, or peft's ``merge(safe_merge=True)`` into a copy) and closing the block puts the frozen
W back: nothing is subtracted, so no rounding is left in W, and a cycle costs half of peft's
merge + unmerge (docs/trl.md, "LoRA merged for generation", has the measurements).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal

from verifiers_stepwise.extras import requires

with requires("verifiers_stepwise.hosts.trl", "torch", extra="trl"):
    import torch
    from torch.nn.utils.rnn import pad_sequence

from verifiers_stepwise.hosts.token_endpoint import GenerateRequest, Generation

__all__ = ["ModelSampler", "SampledLogprobs"]


class SampledLogprobs:
    """A ``generate`` logits processor that records each sampled token's ``log_softmax(logits / temperature)``.

    transformers (5.24) runs a caller's processors before its own temperature and top-p warpers,
    so the scores it sees are the model's logits; at step k it reads the token drawn at step
    k−1 (the last of ``input_ids``) from the distribution kept at k−1, so only one step's
    log-softmax lives at a time. ``finish(sequences)`` reads the last token.
    """

    def __init__(self, temperature: float) -> None:
        self.temperature = temperature
        self.steps: list[torch.Tensor] = []
        self._previous: torch.Tensor | None = None

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self._read(input_ids[:, -1:])
        self._previous = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        return scores

    def _read(self, tokens: torch.Tensor) -> None:
        if self._previous is not None:
            self.steps.append(self._previous.gather(-1, tokens).squeeze(-1))
            self._previous = None

    def finish(self, sequences: torch.Tensor) -> torch.Tensor:
        """(batch, new tokens) logprobs once ``generate`` returned ``sequences``."""
        self._read(sequences[:, -1:])
        return torch.stack(self.steps, dim=1)


class ModelSampler:
    max_new_tokens = 256
    """Cap for requests without ``max_tokens``."""

    def __init__(self, get_model: Callable[[], Any], pad_token_id: int) -> None:
        self.get_model = get_model
        self.pad_token_id = pad_token_id
        self._lock = threading.RLock()
        self._kept: list[tuple[Any, str, torch.Tensor | None, torch.Tensor | None]] = []
        """Each layer merged by the open block, with the name, frozen value and bias of the weight to put back."""
        self._buffers: dict[Any, torch.Tensor] = {}
        """Each plain LoRA layer's merged weight, kept between blocks (as much memory as those W)."""
        self._depth = 0
        """How many ``merged()`` blocks are open; the outermost merges and unmerges."""
        self._was_training = False

    @contextmanager
    def merged(self) -> Iterator[None]:
        """The model in eval mode, a PEFT model's adapters merged, until the block ends.

        The weights must not be trained inside: the block restores the frozen weights as they
        were when it opened.
        """
        with self._lock:
            self._depth += 1
            if self._depth == 1:
                try:
                    self._open(self.get_model())
                except BaseException:  # e.g. peft's safe merge finds NaNs: put back what merged
                    self._depth -= 1
                    self._close(self.get_model())
                    raise
        try:
            yield
        finally:
            with self._lock:
                self._depth -= 1
                if self._depth == 0:
                    self._close(self.get_model())

    def _open(self, model: Any) -> None:
        self._was_training = model.training
        model.eval()
        if hasattr(model, "merge_adapter"):  # a PEFT model
            with requires("verifiers_stepwise.hosts.trl", "peft", extra="trl"):
                from peft.tuners.tuners_utils import BaseTunerLayer

            with torch.no_grad():
                for layer in model.modules():
                    if isinstance(layer, BaseTunerLayer) and not layer.disable_adapters and not layer.merged:
                        self._merge_out_of_place(layer)

    def _merge_out_of_place(self, layer: Any) -> None:
        base = layer.get_base_layer()
        name = getattr(layer, "parameter_name", "weight")  # a ParamWrapper (target_parameters) adapts another
        param = getattr(base, name, None)
        if not isinstance(param, torch.Tensor):  # no one weight to put back (LoRA on nn.MultiheadAttention)
            self._kept.append((layer, name, None, None))
            layer.merge()  # and peft's unmerge on closing
            return
        bias = getattr(base, "bias", None)
        self._kept.append((layer, name, param.data, bias.data if isinstance(bias, torch.Tensor) else None))
        adapters = layer.active_adapters
        plain = (  # one plain LoRA adapter on a weight: W + ΔW into this layer's own buffer
            len(adapters) == 1
            and adapters[0] in getattr(layer, "lora_A", {})
            and adapters[0] not in layer.lora_variant
            and not layer.lora_bias[adapters[0]]
        )
        if not plain:  # peft's merge into a copy of W (variants, biases, other tuners)
            layer.merge(safe_merge=True)
            return
        weight = param.data
        merged = self._buffers.get(layer)
        if merged is None or (merged.shape, merged.dtype, merged.device) != (weight.shape, weight.dtype, weight.device):
            merged = self._buffers[layer] = torch.empty_like(weight)  # first merge, or the model was moved
        torch.add(weight, layer.get_delta_weight(adapters[0]), out=merged)
        param.data = merged
        layer.merged_adapters.append(adapters[0])

    def _close(self, model: Any) -> None:
        # Last merged, first put back: two tuner layers over one weight (tied embeddings with LoRA
        # on embed_tokens and lm_head) each kept what the previous one left, so only the first
        # layer's kept W is the frozen one.
        for layer, name, weight, bias in reversed(self._kept):
            if weight is None:
                with torch.no_grad():
                    layer.unmerge()
                continue
            base = layer.get_base_layer()
            getattr(base, name).data = weight
            if bias is not None:
                base.bias.data = bias
            layer.merged_adapters.clear()
        self._kept.clear()
        model.train(self._was_training)

    def __call__(self, requests: Sequence[GenerateRequest]) -> list[Generation]:
        out: dict[int, Generation] = {}
        key = lambda i: (requests[i].temperature, requests[i].top_p, requests[i].seed)  # noqa: E731
        with self.merged(), torch.no_grad():
            for _, group in itertools.groupby(sorted(range(len(requests)), key=key), key=key):
                indices = list(group)
                out.update(zip(indices, self._sample([requests[i] for i in indices])))
        return [out[i] for i in range(len(requests))]

    def _sample(self, requests: list[GenerateRequest]) -> list[Generation]:
        """One ``generate`` call for requests that share their sampling settings."""
        model = self.get_model()
        device = next(model.parameters()).device
        rows = [torch.tensor(r.prompt_ids, dtype=torch.long) for r in requests]
        input_ids = pad_sequence(rows, batch_first=True, padding_value=self.pad_token_id, padding_side="left")
        attention = pad_sequence([torch.ones_like(row) for row in rows], batch_first=True, padding_side="left")
        limits = [r.max_tokens or self.max_new_tokens for r in requests]
        first = requests[0]
        greedy = first.temperature == 0
        if first.seed is not None:
            torch.manual_seed(first.seed)
        recorder = SampledLogprobs(1.0 if greedy else first.temperature)
        sequences = model.generate(
            input_ids=input_ids.to(device),
            attention_mask=attention.to(device),
            max_new_tokens=max(limits),
            do_sample=not greedy,
            temperature=None if greedy else first.temperature,
            top_p=None if greedy else first.top_p,
            top_k=0 if not greedy else None,
            eos_token_id=sorted({t for r in requests for t in r.stop_token_ids}) or None,
            pad_token_id=self.pad_token_id,
            use_cache=True,
            logits_processor=[recorder],
        )
        sampled = sequences[:, input_ids.shape[1] :].tolist()
        logprobs = recorder.finish(sequences).tolist()
        return [_cut(*row) for row in zip(requests, limits, sampled, logprobs)]


def _cut(request: GenerateRequest, limit: int, tokens: list[int], logprobs: list[float]) -> Generation:
    """A request's completion: up to its first stop token (kept, "stop") or its own ``max_tokens``
    ("length"), whichever the batch's longest generation ran past."""
    end = next((k + 1 for k, t in enumerate(tokens[:limit]) if t in request.stop_token_ids), None)
    finish: Literal["stop", "length"] = "stop" if end is not None else "length"
    end = end if end is not None else min(limit, len(tokens))
    return Generation(tokens[:end], logprobs[:end], finish)

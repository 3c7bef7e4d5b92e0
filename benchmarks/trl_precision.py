"""bfloat16 against float32 for the TRL host's policy: the same LoRA update, computed in each.

    python benchmarks/trl_precision.py --out benchmarks/results/trl_precision

Gemma 3 270M (``hosts.trl.inference.model``) with a LoRA adapter (r 16, α 32, every linear layer) whose B
matrices are drawn N(0, 0.02²), so the adapter is not the no-op it starts as; the same weights in
float32 and in bfloat16 (frozen base in bfloat16, adapters in float32, as TRL builds them). The
batch: ``--episodes`` ``stepwise-sums`` prompts (2 shots, train split) each followed by 6 sampled
tokens, one turn. For each precision we compute the per-token logprobs of the completions and the
gradient of TRL's surrogate ``mean(A · logprob)`` over the LoRA weights with the same random
per-token advantages A, then report how far bfloat16 is from float32: logprob differences,
and the cosine and relative norm of the two gradients (what the optimizer step follows).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    import torch
    import verifiers.v1 as vf
    from peft import LoraConfig, get_peft_model

    from verifiers_stepwise.hosts.trl.inference.model import DEFAULT_MODEL, contiguous_output_embeddings, load_model

    args = parse_args(argv)
    torch.manual_seed(args.seed)
    base, tokenizer = load_model(DEFAULT_MODEL, torch.float32)
    lora = LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", task_type="CAUSAL_LM")
    model32 = get_peft_model(base, lora)
    for name, p in model32.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.02)
    env = vf.load_environment(vf.resolve_env_config({"taskset": {"id": "stepwise-sums", "shots": 2}}))
    prompts = [tokenizer.encode(task.data.prompt) for task in list(env.taskset)[: args.episodes]]
    width = max(map(len, prompts))
    ids = torch.full((len(prompts), width), tokenizer.pad_token_id)
    mask = torch.zeros_like(ids)
    for row, prompt in enumerate(prompts):  # left-padded, as the sampler and TRL pad
        ids[row, width - len(prompt) :], mask[row, width - len(prompt) :] = torch.tensor(prompt), 1
    with torch.no_grad():
        model32.merge_adapter()
        sequences = model32.generate(input_ids=ids, attention_mask=mask, max_new_tokens=6, min_new_tokens=6,
                                     do_sample=True, top_k=0, pad_token_id=tokenizer.pad_token_id)  # fmt: skip
        model32.unmerge_adapter()
    full_mask = torch.cat([mask, torch.ones(len(prompts), 6, dtype=mask.dtype)], 1)
    completion = sequences[:, width:]
    advantages = torch.randn(completion.shape)

    model16 = get_peft_model(load_model(DEFAULT_MODEL, torch.bfloat16)[0], lora)
    model16.load_state_dict(model32.state_dict())  # the same adapter, and the base rounded to bf16
    results = {}
    for name, model in (("float32", model32), ("bfloat16", model16)):
        contiguous_output_embeddings(model)
        model.train()
        start = time.perf_counter()
        logits = model(input_ids=sequences, attention_mask=full_mask, logits_to_keep=7).logits[:, :-1].float()
        logprobs = torch.log_softmax(logits, -1).gather(-1, completion.unsqueeze(-1)).squeeze(-1)
        (-(advantages * logprobs).mean()).backward()
        seconds = time.perf_counter() - start
        grad = torch.cat([p.grad.flatten().float() for n, p in model.named_parameters() if p.grad is not None])
        results[name] = {"logprobs": logprobs.detach(), "grad": grad, "seconds": seconds}
    a, b = results["float32"], results["bfloat16"]
    delta = (b["logprobs"] - a["logprobs"]).abs()
    ratio = (b["logprobs"] - a["logprobs"]).exp()
    report = {
        "episodes": len(prompts),
        "tokens": int(completion.numel()),
        "logprob_abs_diff_mean": float(delta.mean()),
        "logprob_abs_diff_max": float(delta.max()),
        "probability_ratio_range": [float(ratio.min()), float(ratio.max())],
        "grad_cosine": float(torch.nn.functional.cosine_similarity(a["grad"], b["grad"], dim=0)),
        "grad_norm_ratio": float(b["grad"].norm() / a["grad"].norm()),
        "forward_backward_seconds": {"float32": a["seconds"], "bfloat16": b["seconds"]},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(report, indent=1))
    lines = [
        f"`python benchmarks/trl_precision.py --out {args.out}` — {report['episodes']} episodes × 6 tokens",
        "",
        "| | value |",
        "|---|---|",
        f"| per-token logprob, mean abs. difference | {report['logprob_abs_diff_mean']:.4f} |",
        f"| per-token logprob, max abs. difference | {report['logprob_abs_diff_max']:.4f} |",
        f"| probability ratio bf16/fp32, range | {ratio.min():.3f} – {ratio.max():.3f} |",
        f"| LoRA gradient cosine | {report['grad_cosine']:.4f} |",
        f"| LoRA gradient norm, bf16/fp32 | {report['grad_norm_ratio']:.4f} |",
        f"| forward + backward (s), fp32 / bf16 | {a['seconds']:.2f} / {b['seconds']:.2f} |",
    ]
    (args.out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

"""Answer checks per second of the DAPO-math bundle, against math-verify in the same run.

    python benchmarks/dapo_math_answer_checks.py [--responses 4000] [--symbolic 200]

1. ``Answer:`` path (the default integer verifier): ``check_against`` on realistic responses
   (about 1.5 kB of reasoning with TeX, then an ``Answer:`` line in one of many styles, a
   ``\\boxed{}`` only, or no answer) built from the bundled problems. Reference: math-verify
   run directly in the main thread (``parse`` the response, ``verify`` against the gold), the
   usual way math answers are checked. Target: ≥ 10,000 checks/s.
2. math-verify path (``verifier = "math_verify"``): symbolic answers (fractions, roots,
   powers) checked through the bounded worker pool, one at a time and with all checks in
   flight at once. Reference: the same ``verify_pair`` called in-process without any bound.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import time
from collections.abc import Callable, Sequence

from stepwise_dapo_math.answers import check_against, extract_answer, normalize_integer
from stepwise_dapo_math.loaders import BUNDLED_PATH, read_file
from stepwise_dapo_math.symbolic import SymbolicChecker, verify_pair

TARGET = 10_000

STYLES = [
    "Answer: {a}",
    "**Answer:** {a}",
    "Answer: $\\boxed{{{a}}}$",
    "Answer: {a}.",
    "Final answer: $x = {a}$",
    "so the total is $\\boxed{{{a}}}$.",
    "I am not sure.",
]
FILLER = (
    "We consider the expression $\\frac{{{x}}}{{{y}}} + {z}^2$ and simplify step by step. "
    "Since {x} and {y} share no factor, the sum is ${x} + {z} \\cdot {y}$. Checking the "
    "answer: it satisfies the constraints, so we continue with case {z}.\n"
)


def responses(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """(response, canonical gold) pairs; half the answers right, a few unanswered."""
    rng = random.Random(seed)
    rows = list(read_file(BUNDLED_PATH))
    pairs = []
    for _ in range(n):
        gold = normalize_integer(rng.choice(rows)["reward_model"]["ground_truth"])
        assert gold is not None
        answer = gold if rng.random() < 0.5 else str(int(gold) + rng.randint(1, 9))
        body = "".join(FILLER.format(x=rng.randint(1, 99), y=rng.randint(1, 99), z=rng.randint(1, 9)) for _ in range(6))
        pairs.append((body + rng.choice(STYLES).format(a=answer), gold))
    return pairs


def rate(fn: Callable[[], object], count: int, repeats: int) -> float:
    """Best-of-``repeats`` checks per second for ``count`` checks done by ``fn``."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return count / best


def math_verify_direct(pairs: Sequence[tuple[str, str]]) -> None:
    from math_verify import parse, verify

    for response, gold in pairs:
        verify(parse(f"${gold}$"), parse(response))


SYMBOLIC = [
    ("\\frac{{{a}}}{{{b}}}", "{a}/{b}"),
    ("\\sqrt{{{c}}}/{b}", "\\frac{{\\sqrt{{{c}}}}}{{{b}}}"),
    ("{a}^{{2}}-{b}", "{a}*{a}-{b}"),
    ("\\frac{{{a}}}{{{b}}}\\pi", "{a}\\pi/{b}"),
]


def symbolic_pairs(n: int, seed: int = 1) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    pairs = []
    for i in range(n):
        answer, gold = SYMBOLIC[i % len(SYMBOLIC)]
        values = {"a": rng.randint(2, 50), "b": rng.randint(2, 50), "c": rng.choice([2, 3, 5, 7])}
        pairs.append((answer.format(**values), gold.format(**values)))
    return pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--responses", type=int, default=4000)
    parser.add_argument("--symbolic", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    logging.getLogger("math_verify").setLevel(logging.ERROR)

    pairs = responses(args.responses)
    ours = rate(lambda: [check_against(r, g) for r, g in pairs], len(pairs), args.repeats)
    sample = pairs[: max(1, len(pairs) // 10)]
    reference = rate(lambda: math_verify_direct(sample), len(sample), 1)
    correct = sum(check_against(r, g).correct for r, g in pairs)
    print(
        f"Answer: path  {len(pairs)} responses ({correct} correct), "
        f"{sum(map(len, (r for r, _ in pairs))) / len(pairs):.0f} chars on average"
    )
    print(f"  stepwise_dapo_math.check_against  {ours:12,.0f} checks/s")
    print(f"  math-verify parse+verify (ref)    {reference:12,.0f} checks/s   ratio {ours / reference:,.0f}x")
    print(f"  target >= {TARGET:,} checks/s: {'met' if ours >= TARGET else 'NOT MET'}")

    sym = symbolic_pairs(args.symbolic)
    extracted = [(extract_answer(f"Answer: {a}")[0], g) for a, g in sym]  # type: ignore[index]
    checker = SymbolicChecker(workers=args.workers, timeout_s=5.0)
    try:
        checker.check("\\frac{1}{2}", "0.5")  # start the workers outside the timing
        for _ in range(args.workers * 2):
            checker.check("\\sqrt{4}", "2.0")
        direct = rate(lambda: [verify_pair(a, g) for a, g in extracted], len(sym), 1)
        serial = rate(lambda: [checker.check(a, g) for a, g in extracted], len(sym), 1)

        async def all_at_once() -> list:
            return await asyncio.gather(*(checker.acheck(a, g) for a, g in extracted))

        concurrent = rate(lambda: asyncio.run(all_at_once()), len(sym), 1)
        right = sum(checker.check(a, g).correct for a, g in extracted)
    finally:
        checker.close()
    print(f"math-verify path  {len(sym)} symbolic answers ({right} verified equal), {args.workers} workers, 5 s bound")
    print(f"  in-process verify_pair, no bound (ref)  {direct:10,.0f} checks/s")
    print(f"  bounded pool, one at a time             {serial:10,.0f} checks/s   ratio {serial / direct:.2f}x")
    print(f"  bounded pool, all in flight             {concurrent:10,.0f} checks/s   ratio {concurrent / direct:.2f}x")


if __name__ == "__main__":
    main()

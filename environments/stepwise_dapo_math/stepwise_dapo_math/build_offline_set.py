"""Build the bundled offline problem set: ``python -m stepwise_dapo_math.build_offline_set``.

Needs the ``data`` extra (``pip install -e "environments/stepwise_dapo_math[data]"``): the
problems come from pinned package versions, and the output is byte-for-byte reproducible.

Sources (nothing is downloaded at build time; both install from PyPI):

* **CHAMP** (``champ-dataset`` 1.0.0, MIT; Mao, Kim, Zhou 2024, "CHAMP: A Competition-level
  Dataset for Fine-Grained Analyses of LLMs' Mathematical Reasoning Capabilities"): 270
  competition-style problems. Kept: the 128 whose reference answer states one integer, read
  by the explicit patterns in :data:`CHAMP_ANSWER_PATTERNS` (``252``, ``C(10, 5), or
  equivalently 252``, ``0 is the only possible value``, ``100 (i.e., all values)``, ...).
  Answers that are formulas in n, yes/no, sets or several values are left out.
* **reasoning-gym** (``reasoning-gym`` 0.1.25, Apache-2.0): procedurally generated problems
  from the generators and seeds in :data:`GENERATORS`, each checked with the generator's own
  ``score_answer`` and kept only if its answer is an integer.

Every row is in the DAPO-Math-17k schema (the DAPO user message, ``reward_model.ground_truth``,
``extra_info.index``) plus ``extra_info.split``: ``test`` for ids whose SHA-256 is 0 mod 5,
else ``train``. ``MANIFEST.json`` records versions, seeds, configs, counts and the file hash;
``licenses/`` holds the sources' license texts copied from the installed distributions.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from collections import Counter
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

from stepwise_dapo_math.answers import normalize_integer
from stepwise_dapo_math.loaders import BUNDLED_PATH
from stepwise_dapo_math.prompts import dapo_prompt

DATA_DIR, DATA_FILE = BUNDLED_PATH.parent, BUNDLED_PATH.name
MANIFEST_FILE = "MANIFEST.json"
FORMAT_VERSION = 1

_INT = r"(-?\d+)"
CHAMP_ANSWER_PATTERNS: tuple[str, ...] = (
    rf"{_INT}",
    rf".+, or equivalently {_INT}",
    rf"{_INT} \((?:i\.e\., )?(?:all|none|no) [^()]*\)",
    rf"{_INT} is the only possible value",
    rf"The limit exists and is equal to {_INT}",
    rf"The only possible value for the limit is {_INT}",
    rf"{_INT} (?:values|pairs|roots|inequalities)",
)

# (generator, how many, seed, config overrides): seeds are fixed so the file never changes.
GENERATORS: tuple[tuple[str, int, int, dict[str, Any]], ...] = (
    ("gcd", 20, 1001, {"min_numbers": 2, "max_numbers": 3, "max_value": 10000}),
    ("lcm", 20, 1002, {"min_numbers": 2, "max_numbers": 3}),
    ("count_primes", 20, 1003, {}),
    ("number_sequence", 25, 1004, {}),
    ("simple_geometry", 20, 1005, {}),
    ("basic_arithmetic", 25, 1006, {}),
    ("leg_counting", 20, 1007, {}),
    ("aiw", 15, 1008, {}),
    ("count_bits", 15, 1009, {}),
    ("products", 20, 1010, {}),
)

PINNED = {"reasoning-gym": "0.1.25", "champ-dataset": "1.0.0"}


def split_of(ident: str) -> str:
    return "test" if int(hashlib.sha256(ident.encode()).hexdigest(), 16) % 5 == 0 else "train"


def row(ident: str, problem: str, answer: str, data_source: str, spdx: str) -> dict:
    return {
        "data_source": data_source,
        "prompt": [{"role": "user", "content": dapo_prompt(problem)}],
        "ability": "MATH",
        "reward_model": {"style": "rule", "ground_truth": answer},
        "extra_info": {
            "index": ident,
            "split": split_of(ident),
            "problem": problem.strip(),
            "license": spdx,
        },
    }


def champ_integer_answer(answer: str) -> str | None:
    for pattern in CHAMP_ANSWER_PATTERNS:
        match = re.fullmatch(pattern, answer.strip())
        if match is not None:
            return normalize_integer(match.group(1))
    return None


def champ_rows() -> Iterator[dict]:
    import champ_dataset

    for ident, problem in champ_dataset.load("v0").problems.items():
        answer = champ_integer_answer(problem.answer)
        if answer is not None:
            yield row(f"champ/{ident}", problem.text, answer, "champ", "MIT")


def reasoning_gym_rows() -> Iterator[dict]:
    import reasoning_gym

    for name, size, seed, overrides in GENERATORS:
        dataset = reasoning_gym.create_dataset(name, seed=seed, size=size, **overrides)
        for i, entry in enumerate(dataset):
            answer = normalize_integer(str(entry["answer"]))
            if answer is None or dataset.score_answer(str(entry["answer"]), entry) != 1.0:
                raise RuntimeError(f"reasoning-gym {name}[{i}] has no integer answer: {entry}")
            ident = f"reasoning_gym/{name}/{seed}/{i}"
            yield row(ident, entry["question"], answer, f"reasoning_gym/{name}", "Apache-2.0")


def check_versions() -> dict[str, str]:
    found = {name: metadata.version(name) for name in PINNED}
    wrong = {name: v for name, v in found.items() if v != PINNED[name]}
    if wrong:
        raise SystemExit(
            f"the bundled set is built from {PINNED}; installed {wrong}. Install the `data` "
            "extra of stepwise-dapo-math to get the pinned versions."
        )
    return found


def build(out: Path) -> dict:
    """Write the data file, manifest and licenses into ``out``; return the manifest."""
    versions = check_versions()
    rows = [*champ_rows(), *reasoning_gym_rows()]
    ids = Counter(r["extra_info"]["index"] for r in rows)
    if max(ids.values()) > 1:
        raise RuntimeError(f"duplicate ids: {[i for i, n in ids.items() if n > 1]}")
    out.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows)
    (out / DATA_FILE).write_text(text, encoding="utf-8")
    licenses = out / "licenses"
    licenses.mkdir(exist_ok=True)
    for name in PINNED:
        (licenses / f"{name}.txt").write_text(_license_text(name), encoding="utf-8")
    manifest = {
        "format_version": FORMAT_VERSION,
        "file": DATA_FILE,
        "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
        "rows": len(rows),
        "splits": dict(sorted(Counter(r["extra_info"]["split"] for r in rows).items())),
        "split_rule": "test if int(sha256(extra_info.index), 16) % 5 == 0 else train",
        "sources": {
            "champ-dataset": {
                "version": versions["champ-dataset"],
                "license": "MIT",
                "citation": "Mao, Kim, Zhou (2024). CHAMP: A Competition-level Dataset for "
                "Fine-Grained Analyses of LLMs' Mathematical Reasoning Capabilities.",
                "homepage": "https://yujunmao1.github.io/CHAMP/",
                "selection": "problems whose reference answer matches one of answer_patterns",
                "answer_patterns": list(CHAMP_ANSWER_PATTERNS),
                "rows": sum(r["data_source"] == "champ" for r in rows),
            },
            "reasoning-gym": {
                "version": versions["reasoning-gym"],
                "license": "Apache-2.0",
                "homepage": "https://github.com/open-thought/reasoning-gym",
                "generators": [
                    {"name": name, "size": size, "seed": seed, "config": overrides}
                    for name, size, seed, overrides in GENERATORS
                ],
                "rows": sum(r["data_source"].startswith("reasoning_gym/") for r in rows),
            },
        },
    }
    (out / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def _license_text(distribution: str) -> str:
    dist = metadata.distribution(distribution)
    for file in dist.files or []:
        if Path(str(file)).name.upper().startswith("LICENSE"):
            return Path(str(dist.locate_file(file))).read_text(encoding="utf-8")
    raise RuntimeError(f"{distribution} ships no LICENSE file")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DATA_DIR, help="output folder")
    args = parser.parse_args(argv)
    manifest = build(args.out)
    print(f"wrote {manifest['rows']} problems {manifest['splits']} to {args.out / DATA_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

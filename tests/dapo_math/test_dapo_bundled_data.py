"""The bundled offline set: what it holds, where it comes from, and that the script rebuilds it."""

from __future__ import annotations

import hashlib
import json
from collections import Counter

import pytest
from stepwise_dapo_math import build_offline_set
from stepwise_dapo_math.answers import normalize_integer
from stepwise_dapo_math.loaders import BUNDLED_PATH
from stepwise_dapo_math.prompts import problem_of

DATA = BUNDLED_PATH.parent
ROWS = [json.loads(line) for line in BUNDLED_PATH.read_text(encoding="utf-8").splitlines()]
MANIFEST = json.loads((DATA / "MANIFEST.json").read_text(encoding="utf-8"))


def test_at_least_200_problems_in_the_dapo_schema_with_integer_answers():
    assert len(ROWS) >= 200
    for row in ROWS:
        (message,) = row["prompt"]
        assert message["role"] == "user"
        assert problem_of(message["content"]) == row["extra_info"]["problem"]
        gold = row["reward_model"]["ground_truth"]
        assert normalize_integer(gold) == gold, row["extra_info"]["index"]
    assert len({row["extra_info"]["index"] for row in ROWS}) == len(ROWS)


def test_both_sources_are_present_and_licensed():
    sources = Counter(row["data_source"].split("/")[0] for row in ROWS)
    assert sources["champ"] >= 100 and sources["reasoning_gym"] >= 100
    licenses = {row["data_source"].split("/")[0]: row["extra_info"]["license"] for row in ROWS}
    assert licenses == {"champ": "MIT", "reasoning_gym": "Apache-2.0"}
    assert "Permission is hereby granted" in (DATA / "licenses" / "champ-dataset.txt").read_text()
    assert "Apache License" in (DATA / "licenses" / "reasoning-gym.txt").read_text()


def test_the_manifest_describes_the_file():
    assert MANIFEST["sha256"] == hashlib.sha256(BUNDLED_PATH.read_bytes()).hexdigest()
    assert MANIFEST["rows"] == len(ROWS)
    assert MANIFEST["splits"] == dict(Counter(row["extra_info"]["split"] for row in ROWS))
    assert MANIFEST["sources"]["reasoning-gym"]["version"] == build_offline_set.PINNED["reasoning-gym"]
    generators = MANIFEST["sources"]["reasoning-gym"]["generators"]
    assert [(g["name"], g["size"], g["seed"]) for g in generators] == [
        (name, size, seed) for name, size, seed, _ in build_offline_set.GENERATORS
    ]


def test_the_split_is_a_function_of_the_id():
    for row in ROWS:
        assert row["extra_info"]["split"] == build_offline_set.split_of(row["extra_info"]["index"])
    assert set(MANIFEST["splits"]) == {"train", "test"}


@pytest.mark.parametrize(
    ("answer", "integer"),
    [
        ("239", "239"),
        ("C(10, 5), or equivalently 252", "252"),
        ("0 is the only possible value", "0"),
        ("-3 is the only possible value", "-3"),
        ("100 (i.e., all values)", "100"),
        ("The limit exists and is equal to 3", "3"),
        ("98 values", "98"),
        ("2^(n-1)", None),
        ("At least 1 number", None),
        ("376 and 625", None),
        ("Yes", None),
    ],
)
def test_champ_answers_are_read_only_when_they_state_one_integer(answer, integer):
    assert build_offline_set.champ_integer_answer(answer) == integer


@pytest.mark.slow
def test_the_committed_script_rebuilds_the_committed_data_byte_for_byte(tmp_path):
    build_offline_set.main(["--out", str(tmp_path)])
    for name in ["offline.jsonl", "MANIFEST.json", "licenses/champ-dataset.txt", "licenses/reasoning-gym.txt"]:
        assert (tmp_path / name).read_bytes() == (DATA / name).read_bytes(), name

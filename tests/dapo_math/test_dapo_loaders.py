"""Loading problems: hub (offline fallback), local files, bundled set; deterministic selection."""

from __future__ import annotations

import json
import warnings

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import verifiers.v1 as vf
from stepwise_dapo_math.config import DapoMathTasksetConfig
from stepwise_dapo_math.loaders import (
    BUNDLED,
    BUNDLED_PATH,
    PRESETS,
    DatasetError,
    Problem,
    hub_reachable,
    load_problems,
    select,
)
from stepwise_dapo_math.prompts import DAPO_PREFIX, dapo_prompt
from stepwise_dapo_math.taskset import DapoMathTaskset

ID = "stepwise-dapo-math"

DAPO_ROWS = [
    {
        "data_source": "math_dapo",
        "prompt": [{"role": "user", "content": dapo_prompt("What is 6 times 7?")}],
        "ability": "MATH",
        "reward_model": {"ground_truth": "42", "style": "rule-lighteval/MATH_v2"},
        "extra_info": {"index": "uuid-1"},
    },
    {
        "data_source": "math_dapo",
        "prompt": [{"role": "user", "content": dapo_prompt("What is 2 + 2?")}],
        "ability": "MATH",
        "reward_model": {"ground_truth": "4", "style": "rule-lighteval/MATH_v2"},
        "extra_info": {"index": "uuid-2"},
    },
]


def config(**fields) -> DapoMathTasksetConfig:
    return DapoMathTasksetConfig(id=ID, **fields)


def bundled_count() -> int:
    return sum(1 for line in BUNDLED_PATH.read_text().splitlines() if line.strip())


def offline(monkeypatch) -> None:
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import datasets.config

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)


def test_offline_the_default_dataset_falls_back_to_the_bundled_set_loudly(monkeypatch):
    """Only the default dataset, with a warning on stderr (the logger it used to go to has no
    handler under vf-eval), and the preset's split still holds."""
    offline(monkeypatch)
    assert config().dataset == "dapo-math-17k"
    with pytest.warns(UserWarning, match=r"DAPO-Math-17k.*bundled offline set.*--env.taskset.dataset bundled"):
        problems = load_problems(config())
    assert 0 < len(problems) < bundled_count() and {p.split for p in problems} == {"train"}


def test_a_dataset_the_user_named_is_never_replaced(monkeypatch):
    """``--env.taskset.dataset aime-2024`` offline ran bundled CHAMP problems instead."""
    offline(monkeypatch)
    with pytest.raises(DatasetError, match=r"'aime-2024'.*To run offline on the bundled problems.*dataset bundled"):
        load_problems(config(dataset="aime-2024"))


def test_without_fallback_an_unreachable_hub_is_an_error(monkeypatch):
    offline(monkeypatch)
    with pytest.raises(DatasetError, match="DAPO-Math-17k"):
        load_problems(config(offline_fallback=False))


def test_hub_rows_are_read_with_the_preset_repo_and_split(monkeypatch):
    import datasets

    calls = []

    def fake_load_dataset(repo, subset, split):
        calls.append((repo, subset, split))
        return datasets.Dataset.from_list(DAPO_ROWS * 3)  # DAPO-17k repeats each problem

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    problems = load_problems(config())
    assert calls == [("BytedTsinghua-SIA/DAPO-Math-17k", None, "train")]
    assert [(p.id, p.answer, p.problem) for p in problems] == [
        ("uuid-1", "42", "What is 6 times 7?"),
        ("uuid-2", "4", "What is 2 + 2?"),
    ]
    assert len(load_problems(config(dedupe=False))) == 6
    load_problems(config(dataset="aime-2025"))
    assert calls[-1] == ("math-ai/aime25", None, "test")
    load_problems(config(dataset="someone/other", subset="hard", split="validation"))
    assert calls[-1] == ("someone/other", "hard", "validation")


def test_a_hub_that_does_not_answer_is_read_from_the_cache_in_offline_mode(monkeypatch):
    """One probe, no retries: ``datasets`` is asked for the dataset in its offline mode (the
    cache only) when the hub does not answer, and both libraries' flags are restored after."""
    import datasets
    import datasets.config
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # discard port: nothing answers
    seen = []

    def cached_only(repo, subset, split):
        seen.append((constants.is_offline_mode(), datasets.config.HF_HUB_OFFLINE))
        return datasets.Dataset.from_list(DAPO_ROWS)

    monkeypatch.setattr(datasets, "load_dataset", cached_only)
    assert not hub_reachable()
    assert [p.id for p in load_problems(config())] == ["uuid-1", "uuid-2"]
    assert seen == [(True, True)]
    assert not constants.HF_HUB_OFFLINE and not datasets.config.HF_HUB_OFFLINE


def test_a_hub_that_answers_with_an_error_status_is_reachable(monkeypatch):
    """Any answer counts: a 404 or 503 from the endpoint is a hub that answers (the loader then
    asks it, and its own errors name what went wrong), only silence sends the loader offline."""
    import http.server
    import threading

    from huggingface_hub import constants

    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=server.handle_request, daemon=True).start()
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{server.server_port}")
    try:
        assert hub_reachable()
    finally:
        server.server_close()
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert not hub_reachable()  # offline mode: no probe at all


def test_presets_name_aime_style_sets():
    assert {"dapo-math-17k", "aime-2024", "aime-2025", "aime-2022-2024"} <= set(PRESETS)


def test_a_local_parquet_file_in_the_dapo_schema(tmp_path):
    path = tmp_path / "dapo.parquet"
    pq.write_table(pa.Table.from_pylist(DAPO_ROWS), path)
    problems = load_problems(config(path=path))
    assert [p.answer for p in problems] == ["42", "4"]
    assert problems[0].prompt.startswith(DAPO_PREFIX)
    assert problems[0].source == "math_dapo"


def test_a_local_jsonl_file_with_plain_columns_gets_the_dapo_template(tmp_path):
    path = tmp_path / "aime.jsonl"
    rows = [{"id": f"p{i}", "problem": f"Compute {i} squared.", "answer": i * i} for i in range(5)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    problems = load_problems(config(path=path))
    assert [p.id for p in problems] == [f"p{i}" for i in range(5)]
    assert problems[3].prompt == dapo_prompt("Compute 3 squared.")
    assert problems[3].answer == "9"


def test_named_columns_and_nested_keys(tmp_path):
    path = tmp_path / "custom.parquet"
    table = pa.Table.from_pylist(
        [{"q": "One plus one?", "meta": {"gold": 2.0}}, {"q": "Two plus two?", "meta": {"gold": 4.0}}]
    )
    pq.write_table(table, path)
    problems = load_problems(config(path=path, problem_key="q", answer_key="meta.gold"))
    assert [(p.problem, p.answer) for p in problems] == [("One plus one?", "2"), ("Two plus two?", "4")]
    assert problems[0].id == f"{path}#0"


def test_bad_rows_are_named(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"question": "Why?"}) + "\n")
    with pytest.raises(DatasetError, match=r"bad.jsonl row 0: no answer column .*question"):
        load_problems(config(path=path))
    path.write_text('{"problem": "x", "answer": 1}\nnot json\n')
    with pytest.raises(DatasetError, match=r"bad.jsonl:2: not valid JSON"):
        load_problems(config(path=path))
    with pytest.raises(DatasetError, match="does not exist"):
        load_problems(config(path=tmp_path / "missing.parquet"))
    (tmp_path / "data.csv").write_text("a,b\n")
    with pytest.raises(DatasetError, match="unsupported format '.csv'"):
        load_problems(config(path=tmp_path / "data.csv"))


def test_the_bundled_split_field_selects_rows():
    train = load_problems(config(dataset=BUNDLED, split="train"))
    test = load_problems(config(dataset=BUNDLED, split="test"))
    assert len(train) + len(test) == bundled_count()
    assert {p.split for p in train} == {"train"} and {p.split for p in test} == {"test"}
    assert not {p.id for p in train} & {p.id for p in test}


def test_selection_is_deterministic():
    first = load_problems(config(dataset=BUNDLED, shuffle=True, seed=7, limit=20))
    again = load_problems(config(dataset=BUNDLED, shuffle=True, seed=7, limit=20))
    other = load_problems(config(dataset=BUNDLED, shuffle=True, seed=8, limit=20))
    ordered = load_problems(config(dataset=BUNDLED, limit=20))
    assert [p.id for p in first] == [p.id for p in again]
    assert [p.id for p in first] != [p.id for p in other]
    assert [p.id for p in ordered] == [p.id for p in load_problems(config(dataset=BUNDLED))][:20]


def test_repeated_ids_are_dropped_or_made_unique():
    problems = [Problem(i, "p", "1", None, "s") for i in ("a", "b", "a", "a")]
    assert [p.id for p in select(problems)] == ["a", "b"]
    assert [p.id for p in select(problems, dedupe=False)] == ["a", "b", "a#2", "a#3"]


def three_problems(tmp_path):
    path = tmp_path / "three.jsonl"
    path.write_text(
        "".join(json.dumps({"id": f"p{n}", "problem": f"{n} + {n}?", "answer": 2 * n}) + "\n" for n in range(3))
    )
    return path


def test_a_task_count_the_file_cannot_fill_is_warned_about_naming_both_counts(tmp_path):
    """``-n 64`` on a file of three problems runs three tasks; vf-eval said nothing (verifiers'
    ``take`` stops quietly), so ``-r 8`` gave 24 episodes where 512 were asked for."""
    path = three_problems(tmp_path)
    taskset = DapoMathTaskset(config(path=path))
    with pytest.warns(UserWarning) as caught:
        tasks = list(taskset.select(vf.SelectConfig(limit=64)))
    assert len(tasks) == 3
    assert [str(w.message) for w in caught] == [f"-n 64: {path} has only 3 problems after the selection, so 3 are run"]
    with pytest.warns(UserWarning, match="-n 3: .* has only 2 problems after the selection, so 2 are run"):
        assert len(list(taskset.select(vf.SelectConfig(skip=1, limit=3)))) == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a count the data fills, or none, is no news
        assert len(list(taskset.select(vf.SelectConfig(limit=3)))) == 3
        assert len(list(taskset.select(vf.SelectConfig()))) == 3


def test_the_bundles_own_limit_past_the_data_is_warned_about_too(tmp_path):
    path = three_problems(tmp_path)
    with pytest.warns(UserWarning) as caught:
        assert len(load_problems(config(path=path, limit=64))) == 3
    assert [str(w.message) for w in caught] == [
        f"--env.taskset.limit 64: {path} has only 3 problems after the split filter and de-duplication, so 3 are run"
    ]

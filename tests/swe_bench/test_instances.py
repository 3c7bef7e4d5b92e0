from __future__ import annotations

import json
from pathlib import Path

import pytest
from stepwise_swe_bench.instances import FIXTURES, InstanceError, SweInstance, fixture_instances, load_instances


def hub_rows() -> list[dict]:
    """The bundled tasks as the Hugging Face datasets store them (test lists as JSON text)."""
    rows = []
    for row in fixture_instances():
        row = dict(row)
        row["FAIL_TO_PASS"] = json.dumps(row["FAIL_TO_PASS"])
        row["PASS_TO_PASS"] = json.dumps(row["PASS_TO_PASS"])
        row["image"] = f"swebench/sweb.eval.x86_64.{row['instance_id']}:latest"
        rows.append(row)
    return rows


def test_at_least_five_bundled_tasks_with_every_field():
    instances = load_instances()
    assert len(instances) >= 5
    for instance in instances:
        assert instance.image is None and instance.log_parser == "parse_log_pytest"
        assert instance.FAIL_TO_PASS and instance.PASS_TO_PASS
        assert instance.problem_statement.strip() and "diff --git" in instance.patch
        assert (FIXTURES / "tasks" / instance.instance_id / "repo").is_dir()
        # The eval script carries exactly the hidden test patch, and the markers swebench reads.
        assert instance.test_patch in instance.eval_script
        spec = instance.test_spec()
        assert ">>>>> Start Test Output" in spec.eval_script
        assert "SWEBENCH_TEST_EXIT_CODE=$?" in spec.eval_script  # added by make_test_spec


def test_local_jsonl_and_parquet_load_like_the_hub(tmp_path: Path):
    rows = hub_rows()
    jsonl = tmp_path / "verified.jsonl"
    jsonl.write_text("".join(json.dumps(row) + "\n" for row in rows))
    parquet = tmp_path / "verified.parquet"
    import datasets

    datasets.Dataset.from_list(rows).to_parquet(str(parquet))
    expected = {i.instance_id: i for i in load_instances()}
    for path in (jsonl, parquet):
        loaded = load_instances(str(path))
        assert [i.instance_id for i in loaded] == [r["instance_id"] for r in rows]
        for instance in loaded:
            bundled = expected[instance.instance_id]
            assert instance.FAIL_TO_PASS == bundled.FAIL_TO_PASS
            assert instance.eval_script == bundled.eval_script
            assert instance.image == f"swebench/sweb.eval.x86_64.{instance.instance_id}:latest"
    picked = load_instances(str(jsonl), instance_ids=["stepwise__pager-3"])
    assert [i.instance_id for i in picked] == ["stepwise__pager-3"]


def test_rows_missing_grading_columns_are_rejected_by_name(tmp_path: Path):
    row = hub_rows()[0]
    del row["eval_script"], row["log_parser"]
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(InstanceError) as error:
        load_instances(str(path))
    message = str(error.value)
    assert row["instance_id"] in message and str(path) in message
    assert "eval_script" in message and "log_parser" in message and "swebench>=5" in message


def test_unknown_instance_ids_are_an_error(tmp_path: Path):
    with pytest.raises(InstanceError, match="nope__nope-1"):
        load_instances(instance_ids=["nope__nope-1"])
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(hub_rows()[0]) + "\n")
    with pytest.raises(InstanceError, match="nope__nope-1"):
        load_instances(str(path), instance_ids=["nope__nope-1"])


def test_hub_datasets_go_through_the_real_loader():
    """No hub here (HF_HUB_OFFLINE=1): the official dataset id is what was asked for."""
    with pytest.raises(InstanceError, match="SWE-bench/SWE-bench_Verified"):
        load_instances("verified")


def test_multimodal_assets_are_refused():
    row = {**hub_rows()[0], "image_assets": json.dumps({"test_patch": [{"path": "a.png"}]})}
    with pytest.raises(InstanceError, match="not supported"):
        SweInstance.from_row(row, "test rows")


def test_a_row_without_an_image_gets_the_official_name_swebench_derives(tmp_path: Path):
    row = {**hub_rows()[0], "instance_id": "astropy__astropy-12907"}
    del row["image"]
    path = tmp_path / "verified.jsonl"
    path.write_text(json.dumps(row) + "\n")
    (instance,) = load_instances(str(path))
    assert instance.image == "swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:latest"

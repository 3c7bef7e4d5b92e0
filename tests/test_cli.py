"""``vf-stepwise``: grouping, numbers against the library, bad input, plots, flags, listing.

Most runs call ``cli.main`` in-process (verifiers is imported once); the tests marked
"console script" run the installed ``vf-stepwise`` as a subprocess.
"""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import verifiers.v1 as vf

from tests.docs_shell import run_block, shell_blocks
from tests.test_registry import make_distribution
from verifiers_stepwise import RaggedBatch, get_estimator
from verifiers_stepwise.analysis import report as report_module
from verifiers_stepwise.analysis.cli import main
from verifiers_stepwise.estimators.registry import ESTIMATOR_GROUP
from verifiers_stepwise.estimators.returns import discounted_returns
from verifiers_stepwise.estimators.stepwise import Stepwise
from verifiers_stepwise.testing.trace_files import make_episode, write_episodes, write_large_traces
from verifiers_stepwise.traces.credit import score_group
from verifiers_stepwise.traces.turns import read_turns

VF_STEPWISE = Path(sys.executable).with_name("vf-stepwise")


def rollouts(tasks: int = 3, per_task: int = 4, seed: int = 0, **kwargs) -> list[vf.Episode]:
    """vf-eval-like episodes: no group ids, rollouts of different tasks interleaved."""
    rng = random.Random(seed)
    return [
        make_episode(
            [rng.choice([0.0, 0.25, 0.5, 1.0]) for _ in range(rng.randint(1, 4))],
            task=task,
            run="run-1",
            **kwargs,
        )
        for _ in range(per_task)
        for task in range(tasks)
    ]


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def library_groups(episodes: list[vf.Episode]) -> dict[str, list[vf.Episode]]:
    """Independent grouping for the checks: by task key, in first-seen order."""
    groups: dict[str, list[vf.Episode]] = defaultdict(list)
    for episode in episodes:
        groups[episode.task.key].append(episode)
    return groups


def per_turn_reference(groups: list[list[list[float]]], estimator) -> list[dict]:
    """Per-turn-index statistics in plain Python from the library's per-group results; the
    returns those of ``stepwise`` (the one estimator built on them), None for the others."""
    stepwise = isinstance(estimator, Stepwise)
    by_turn: dict[int, list[tuple[float, float, float]]] = defaultdict(list)
    for group in groups:
        for rewards, advantages in zip(group, estimator(group)):
            returns = (
                discounted_returns(rewards, estimator.config.gamma, estimator.config.aggregation) if stepwise else None
            )
            for t, (r, a) in enumerate(zip(rewards, advantages)):
                by_turn[t].append((r, returns[t] if returns else None, a))
    rows = []
    for t in sorted(by_turn):
        r, R, a = (list(column) for column in zip(*by_turn[t]))
        mean = sum(a) / len(a)
        rows.append(
            {
                "turn": t,
                "count": len(a),
                "mean_reward": sum(r) / len(r),
                "mean_return": sum(R) / len(R) if stepwise else None,
                "advantage_mean": mean,
                "advantage_std": math.sqrt(sum((x - mean) ** 2 for x in a) / len(a)),
                "advantage_min": min(a),
                "advantage_max": max(a),
            }
        )
    return rows


def assert_rows_close(actual: list[dict], expected: list[dict]) -> None:
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected):
        for key, value in want.items():
            assert got[key] == (None if value is None else pytest.approx(value, rel=1e-12, abs=1e-12)), (
                got["turn"],
                key,
            )


# -- grouping -----------------------------------------------------------------------------


def test_vf_eval_output_is_grouped_by_task_and_advantages_equal_score_group(tmp_path, capsys):
    episodes = rollouts(tasks=3, per_task=4)
    traces = write_episodes(tmp_path / "traces.jsonl", episodes)
    code, out, err = run(capsys, "advantages", traces, "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["groups"] == {"count": 3, "by": {"task.key": 3}, "sizes": {"4": 3}, "singleton": 0}
    rows = read_rows(tmp_path / "traces.advantages.jsonl")
    assert report["output"] == str(tmp_path / "traces.advantages.jsonl")

    # The library on the same groups: score_group writes the advantages the CLI reports.
    expected = {}
    for group in library_groups(episodes).values():
        for episode, values in zip(group, [c.advantages for c in score_group(group, "stepwise").values()]):
            for t, value in enumerate(values):
                expected[episode.id, t] = value
    assert {(row["episode"], row["turn"]): row["advantage"] for row in rows} == expected
    assert {row["group_id"] for row in rows} == {e.task.key for e in episodes}
    for row in rows:
        episode = next(e for e in episodes if e.id == row["episode"])
        assert row["reward"] == episode.traces[0].info["turn_rewards"][row["turn"]]
        assert row["line"] == episodes.index(episode) + 1 and row["file"] == str(traces)


def test_group_ids_are_exact_strings_never_parsed_or_merged(tmp_path, capsys):
    # Ids that a numeric or prefix parse would fold together, all of one task.
    ids = ["7", "07", "7.0", " 7", "7-a", "7-b"]
    episodes = [make_episode([1.0, float(j)], group=g) for g in ids for j in range(2)]
    traces = write_episodes(tmp_path / "traces.jsonl", episodes)
    code, out, err = run(capsys, "advantages", traces, "--json", "--no-output")
    assert code == 0, err
    report = json.loads(out)
    assert report["groups"] == {"count": 6, "by": {"group.id": 6}, "sizes": {"2": 6}, "singleton": 0}


def test_the_same_task_in_two_runs_or_two_trainer_groups_is_two_groups(tmp_path, capsys):
    episodes = [make_episode([0.0, 1.0], task=1, run=r) for r in ("run-a", "run-b") for _ in range(2)]
    episodes += [make_episode([1.0], task=2, group=g) for g in ("step1-0", "step2-0") for _ in range(2)]
    traces = write_episodes(tmp_path / "traces.jsonl", episodes)
    code, out, _ = run(capsys, "advantages", traces, "--json", "--no-output")
    assert json.loads(out)["groups"]["by"] == {"task.key": 2, "group.id": 2}


def test_episodes_without_any_id_are_bad_input_never_one_catch_all_group(tmp_path, capsys):
    episodes = rollouts(tasks=2, per_task=2)
    for episode in episodes:
        episode.task.key = episode.task.hash = None
    traces = write_episodes(tmp_path / "traces.jsonl", episodes)
    code, _, err = run(capsys, "advantages", traces)
    assert code == 2
    assert f"{traces}:1: episode has no group.id and its task has no key or hash" in err
    code, _, err = run(capsys, "advantages", traces, "--skip-bad")
    assert code == 2 and "no scorable trajectories" in err and "4 bad lines or traces skipped" in err


def test_task_hash_groups_when_there_is_no_key(tmp_path, capsys):
    episodes = rollouts(tasks=2, per_task=3)
    for episode in episodes:
        episode.task.key = None
    traces = write_episodes(tmp_path / "traces.jsonl", episodes)
    code, out, _ = run(capsys, "advantages", traces, "--json", "--no-output")
    assert json.loads(out)["groups"]["by"] == {"task.hash": 2}


def test_a_group_mixing_tasks_is_reported_with_both_lines(tmp_path, capsys):
    episodes = [
        make_episode([1.0], task=0, group="g"),
        make_episode([0.0], task=0, group="g"),
        make_episode([0.5], task=9, group="g"),
    ]
    traces = write_episodes(tmp_path / "traces.jsonl", episodes)
    code, _, err = run(capsys, "advantages", traces)
    assert code == 2
    key0, key9 = episodes[0].task.key, episodes[2].task.key
    assert f"{traces}:3: group 'g' mixes tasks: task {key9!r} here, {key0!r} at {traces}:1" in err
    code, out, _ = run(capsys, "advantages", traces, "--skip-bad", "--json", "--no-output")
    report = json.loads(out)
    assert report["skipped"]["mixed_group"] == 1 and report["counts"]["trajectories"] == 2


# -- numbers equal the library's ----------------------------------------------------------


@pytest.mark.parametrize(
    "flags",
    [
        [],
        ["--gamma", "0.8", "--baseline", "per_turn", "--scale", "none"],
        ["--aggregation", "max", "--baseline", "leave_one_out"],
    ],
)
def test_summary_and_table_equal_the_library(tmp_path, capsys, flags):
    episodes = rollouts(tasks=4, per_task=5, seed=3)
    traces = write_episodes(tmp_path / "traces.jsonl", episodes)
    fields = dict(zip((f[2:] for f in flags[::2]), flags[1::2]))
    estimator = get_estimator("stepwise", **fields)
    groups = [[e.traces[0].info["turn_rewards"] for e in g] for g in library_groups(episodes).values()]
    expected = per_turn_reference(groups, estimator)

    code, out, err = run(capsys, "advantages", traces, "--json", "--no-output", *flags)
    assert code == 0, err
    (entry,) = json.loads(out)["estimators"]
    assert entry["config"] == estimator.config.model_dump()
    assert_rows_close(entry["turns"], expected)

    code, out, _ = run(capsys, "advantages", traces, "--no-output", *flags)
    table = [line.split("│")[1:-1] for line in out.splitlines() if line.startswith("│")]
    assert len(table) == len(expected)
    for cells, want in zip(table, expected):
        turn, count, *numbers = (float(c.replace(",", "")) for c in cells)
        assert (turn, count) == (want["turn"], want["count"])
        keys = ("mean_reward", "mean_return", "advantage_mean", "advantage_std", "advantage_min", "advantage_max")
        for value, key in zip(numbers, keys):
            assert value == pytest.approx(want[key], abs=5.1e-5), key


def test_compare_and_gamma_sweep_equal_the_library(tmp_path, capsys):
    episodes = rollouts(tasks=3, per_task=4, seed=5)
    traces = write_episodes(tmp_path / "traces.jsonl", episodes)
    out_file = tmp_path / "turns.jsonl"
    code, out, err = run(
        capsys,
        "advantages",
        traces,
        "--gamma",
        "0.6",
        "--compare",
        ":baseline=per_turn",
        "--gammas",
        "0,0.5,1",
        "--json",
        "-o",
        out_file,
    )
    assert code == 0, err
    report = json.loads(out)
    groups = [[e.traces[0].info["turn_rewards"] for e in g] for g in library_groups(episodes).values()]
    main_est = get_estimator("stepwise", gamma=0.6)
    compare = get_estimator("stepwise", gamma=0.6, baseline="per_turn")
    assert [e["label"] for e in report["estimators"]] == [
        "stepwise(scale='none', eps=1e-06, gamma=0.6, aggregation='sum', baseline='absorbing')",
        "stepwise(scale='none', eps=1e-06, gamma=0.6, aggregation='sum', baseline='per_turn')",
    ]
    assert_rows_close(report["estimators"][1]["turns"], per_turn_reference(groups, compare))
    assert [e["config"]["gamma"] for e in report["sweep"]] == [0.0, 0.5, 1.0]
    for entry, gamma in zip(report["sweep"], (0.0, 0.5, 1.0)):
        assert_rows_close(entry["turns"], per_turn_reference(groups, get_estimator("stepwise", gamma=gamma)))

    rows = read_rows(out_file)
    flat = lambda values: [x for group in values for trajectory in group for x in trajectory]  # noqa: E731
    batch = RaggedBatch.from_groups(groups)
    assert [r["advantage"] for r in rows] == main_est.batched(batch).tolist()
    assert [r["compare_advantage"] for r in rows] == compare.batched(batch).tolist()
    assert [r["return"] for r in rows] == flat([[discounted_returns(t, 0.6) for t in g] for g in groups])


def _tables(out: str) -> list[tuple[list[str], list[list[str]]]]:
    """The rich tables in ``out``: each one's column headers (header lines joined) and rows."""
    tables: list[tuple[list[str], list[list[str]]]] = []
    for line in out.splitlines():
        if line.startswith("┏"):
            tables.append(([], []))
        elif line.startswith("┃"):
            cells = [cell.strip() for cell in line.split("┃")[1:-1]]
            headers = tables[-1][0]
            headers[:] = [f"{a} {b}".strip() for a, b in zip(headers, cells)] if headers else cells
        elif line.startswith("│"):
            tables[-1][1].append([cell.strip() for cell in line.split("│")[1:-1]])
    return tables


@pytest.mark.parametrize("columns", [200, 100, 80])
def test_compare_prints_both_configs_side_by_side(tmp_path, capsys, monkeypatch, columns):
    """Each turn index on one row: the shared columns once, then each statistic of the main
    config beside the compared one's; a console too narrow for one table gets the statistics
    split over several, still side by side, each table within the console, no number cut short."""
    traces = write_episodes(tmp_path / "traces.jsonl", rollouts(tasks=3, per_task=4, seed=5))
    args = ("advantages", traces, "--gamma", "0.6", "--compare", ":baseline=per_turn", "--no-output")
    main_config, compared = json.loads(run(capsys, *args, "--json")[1])["estimators"]
    monkeypatch.setenv("COLUMNS", str(columns))
    code, out, err = run(capsys, *args)
    assert code == 0, err
    words = " ".join(out.split())  # a narrow console wraps the titles
    assert f"main: {main_config['label']}" in words and f"compare: {compared['label']}" in words
    assert "…" not in out and max(len(line) for line in out.splitlines()) <= columns
    tables = _tables(out)
    assert (len(tables) == 1) == (columns == 200)
    assert ("(split in" in out) == (columns < 200)
    number = report_module.number
    stats = {
        "mean return": ("mean_return", ""),
        "mean adv": ("advantage_mean", "+"),
        "std adv": ("advantage_std", ""),
        "min adv": ("advantage_min", "+"),
        "max adv": ("advantage_max", "+"),
    }
    expected = []
    for a, b in zip(main_config["turns"], compared["turns"]):
        row = [("turn", str(a["turn"])), ("count", f"{a['count']:,}"), ("mean reward", number(a["mean_reward"]))]
        for stat, (key, sign) in stats.items():
            row += [(f"{stat} main", number(a[key], sign)), (f"{stat} compare", number(b[key], sign))]
        expected.append(row)
    printed: list[list[tuple[str, str]]] = [[] for _ in expected]
    for i, (headers, rows) in enumerate(tables):
        assert headers[0] == "turn" and (i == 0) == ("count" in headers)
        assert [cells[0] for cells in rows] == [row[0][1] for row in expected]  # a row per turn, in order
        for row, cells in zip(printed, rows):
            row += list(zip(headers, cells))[0 if i == 0 else 1 :]
    assert printed == expected  # every statistic once, main beside compare, in order


def test_compare_another_estimator_and_grpo_shows_no_returns(tmp_path, capsys):
    """Returns are the estimator's own: grpo is not built on per-turn returns, so it has none
    (they were once recomputed with a guessed gamma of 1)."""
    episodes = rollouts(tasks=2, per_task=3, seed=1)
    traces = write_episodes(tmp_path / "traces.jsonl", episodes)
    code, out, err = run(
        capsys,
        "advantages",
        traces,
        "--estimator",
        "grpo",
        "--scale",
        "none",
        "--compare",
        "stepwise:gamma=1,baseline=trajectory",
        "--json",
        "--no-output",
    )
    assert code == 0, err
    grpo, stepwise = json.loads(out)["estimators"]
    assert {row["mean_return"] for row in grpo["turns"]} == {None}
    assert stepwise["config"]["baseline"] == "trajectory" and stepwise["config"]["gamma"] == 1.0
    groups = [[e.traces[0].info["turn_rewards"] for e in g] for g in library_groups(episodes).values()]
    assert_rows_close(grpo["turns"], per_turn_reference(groups, get_estimator("grpo", scale="none")))


def test_train_client_tokens_are_counted_per_turn(tmp_path, capsys):
    episodes = [
        make_episode([0.0, 1.0], task=0, tokens=True, tokens_per_call=4, calls_per_turn=2),
        make_episode([1.0, 0.0, 0.5], task=0, tokens=True, tokens_per_call=5),
    ]
    traces = write_episodes(tmp_path / "traces.jsonl", episodes)
    code, out, err = run(capsys, "advantages", traces)
    assert code == 0, err
    assert "tokens" in out
    rows = read_rows(tmp_path / "traces.advantages.jsonl")
    assert [r["tokens"] for r in rows] == [8, 8, 5, 5, 5]
    for episode in episodes:  # the library's own token accounting agrees
        trace = episode.traces[0]
        counts = [sum(sum(trace.nodes[i].mask) for i in nodes) for nodes in trace.info["turn_nodes"]]
        assert counts == [r["tokens"] for r in rows if r["episode"] == episode.id]


def test_output_paths_are_checked_before_reading_and_never_an_input(tmp_path, capsys):
    """``-o`` onto a hard link of the input overwrote the traces; an output in a missing
    directory failed only after the whole input was read."""
    import os

    traces = write_episodes(tmp_path / "traces.jsonl", rollouts(tasks=1, per_task=2))
    before = traces.read_bytes()
    os.link(traces, tmp_path / "hard.jsonl")
    (tmp_path / "soft.jsonl").symlink_to(traces)
    for alias in ("hard.jsonl", "soft.jsonl"):
        code, _, err = run(capsys, "advantages", traces, "-o", tmp_path / alias)
        assert code == 2 and f"would overwrite the input file {traces}" in err, err
    code, _, err = run(capsys, "advantages", traces, "--no-output", "--plot", tmp_path / "hard.jsonl")
    assert code == 2 and "would overwrite the input file" in err
    assert traces.read_bytes() == before
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")  # reading it would fail: the output check comes first
    code, _, err = run(capsys, "advantages", bad, "-o", tmp_path / "missing" / "out.jsonl")
    assert code == 2 and "is not a directory" in err and "not json" not in err


def test_a_reward_too_large_for_a_float_is_bad_input_not_a_crash(tmp_path, capsys):
    """A 400-digit integer reward raised a raw OverflowError, even with --skip-bad."""
    traces = write_episodes(tmp_path / "huge.jsonl", [make_episode([0.123456789, 0.0]), make_episode([1.0])])
    text = traces.read_text()
    marker = '"turn_rewards": [0.123456789'
    assert text.count(marker) == 1
    traces.write_text(text.replace(marker, f'"turn_rewards": [{10**400}'))  # valid JSON no float can hold
    code, _, err = run(capsys, "advantages", traces, "--no-output")
    assert code == 2 and "turn 0 reward 10000000000000000000... (401 digits) is not a finite number" in err
    code, out, err = run(capsys, "advantages", traces, "--no-output", "--skip-bad", "--json")
    assert code == 0, err
    assert json.loads(out)["counts"]["trajectories"] == 1


def test_nothing_scorable_says_why(tmp_path, capsys):
    errored = write_episodes(tmp_path / "errored.jsonl", [make_episode([1.0], ok=False) for _ in range(3)])
    code, _, err = run(capsys, "advantages", errored, "--no-output")
    assert code == 2 and "no scorable trajectories" in err and "of 3 traces, 3 errored (trace.ok" in err
    (tmp_path / "empty.jsonl").write_text("")
    code, _, err = run(capsys, "advantages", tmp_path / "empty.jsonl", "--no-output")
    assert code == 2 and "the files hold no traces" in err


def test_errored_and_untrainable_traces_are_left_out_like_score_group_and_counted(tmp_path, capsys):
    group = [
        make_episode([0.0, 1.0]),
        make_episode([1.0]),
        make_episode([0.5, 0.5], ok=False),
        make_episode([1.0, 1.0], agent="judge", trainable=False),
        make_episode([0.0, 0.0, 0.25]),
    ]
    traces = write_episodes(tmp_path / "traces.jsonl", group)
    code, out, err = run(capsys, "advantages", traces, "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["counts"] | {"errored": 1, "not_trainable": 1, "trajectories": 3, "traces": 5} == report["counts"]
    records = score_group(group, "stepwise")
    rows = read_rows(tmp_path / "traces.advantages.jsonl")
    for episode in group:
        credit = records.get(episode.traces[0].id)
        assert [r["advantage"] for r in rows if r["episode"] == episode.id] == (credit.advantages if credit else [])


# -- bad input ----------------------------------------------------------------------------


def broken_file(folder: Path) -> tuple[Path, dict[str, int]]:
    good = rollouts(tasks=2, per_task=3)
    no_rewards = make_episode([1.0, 0.0], task=0)
    del no_rewards.traces[0].info["turn_rewards"], no_rewards.traces[0].info["turn_nodes"]
    too_many = make_episode([1.0, 0.0], task=1)
    too_many.traces[0].info["turn_rewards"].append(0.5)
    not_a_number = make_episode([1.0, 0.0], task=1)
    not_a_number.traces[0].info["turn_rewards"][1] = "high"
    lines = [json.dumps(e.to_record()) for e in good]
    lines[1] = lines[1][: len(lines[1]) // 2]  # line 2: torn write
    lines.insert(3, "")  # line 4: blank
    lines.insert(4, json.dumps({"id": "x", "traces": []}))  # line 5: not an episode
    lines += [json.dumps(e.to_record()) for e in (no_rewards, too_many, not_a_number)]  # 9..11
    lines.append(lines[0])  # line 12: duplicate
    folder.mkdir(exist_ok=True)
    path = folder / "traces.jsonl"
    path.write_text("\n".join(lines) + "\n")
    skipped = {"malformed": 2, "duplicate": 1, "no_group": 0, "mixed_group": 0, "no_turn_rewards": 1, "bad_turns": 2}
    return path, skipped


def test_every_kind_of_bad_input_stops_with_its_line_then_skip_bad_counts_them(tmp_path, capsys):
    path, skipped = broken_file(tmp_path)
    first_id = json.loads(path.read_text().splitlines()[0])["id"]
    expected_first = [
        (2, "not valid JSON"),
        (5, "not a verifiers episode record: task: Field required"),
        (9, "trace 0 (agent 'agent') has no info['turn_rewards']"),
        (10, "3 turn_rewards but 2 turn_nodes entries"),
        (11, "turn 1 reward 'high' is not a finite number"),
        (12, f"episode {first_id!r} was already read at {{file}}:1"),
    ]
    lines = path.read_text().splitlines(keepends=True)
    for number, message in expected_first:
        # Fix every earlier problem so each one is the first to be met in turn.
        fixed = tmp_path / f"upto{number}.jsonl"
        keep = [line for i, line in enumerate(lines, 1) if i >= number or i not in {n for n, _ in expected_first}]
        fixed.write_text("".join(keep))
        at = number - sum(1 for n, _ in expected_first if n < number)
        code, _, err = run(capsys, "advantages", fixed, "--no-output", "--missing", "error")
        assert code == 2
        assert err.startswith(f"error: {fixed}:{at}: ") and message.format(file=fixed) in err, err
        assert "--skip-bad" in err

    code, out, err = run(capsys, "advantages", path, "--skip-bad", "--json", "--no-output", "--missing", "error")
    assert code == 0, err
    report = json.loads(out)
    assert report["skipped"] == skipped
    counts = report["counts"]
    assert counts["lines"] == 12 and counts["blank_lines"] == 1 and counts["episodes"] == 9
    # Nothing silently dropped: every trace is scored, excluded or skipped.
    trace_problems = skipped["no_turn_rewards"] + skipped["bad_turns"] + skipped["duplicate"]
    assert counts["traces"] == counts["trajectories"] + counts["not_trainable"] + counts["errored"] + trace_problems
    assert counts["trajectories"] == 5
    assert len(report["problems"]) == 6 and report["problems"][0].startswith(f"{path}:2: not valid JSON")

    code, out, _ = run(capsys, "advantages", path, "--skip-bad", "--no-output", "--missing", "error")
    assert (
        "skipped 2 malformed lines, 1 duplicate episodes, 1 traces without turn rewards, "
        "2 traces with invalid turns" in out
    )
    assert f"{path}:9: trace 0" in out
    assert "[yellow]" not in out  # each problem is printed as text, styled, its brackets kept


def test_missing_file_unknown_estimator_and_bad_config_are_clear_errors(tmp_path, capsys):
    traces = write_episodes(tmp_path / "traces.jsonl", rollouts(tasks=1, per_task=2))
    code, _, err = run(capsys, "advantages", tmp_path / "nope.jsonl")
    assert code == 2 and f"{tmp_path / 'nope.jsonl'}: no such traces file" in err
    with pytest.raises(SystemExit) as exit:
        main(["advantages", str(traces), "--estimator", "kevin"])
    assert exit.value.code == 2
    installed = "installed: gigpo, grpo, stepwise, turn_credit"
    assert f"no advantage estimator named 'kevin'; {installed}" in capsys.readouterr().err
    code, _, err = run(capsys, "advantages", traces, "--gamma", "1.5")
    assert code == 2 and "field 'gamma'" in err
    code, _, err = run(capsys, "advantages", traces, "--compare", ":gama=0.5")
    assert code == 2 and "field 'gama': unknown field" in err
    code, _, err = run(capsys, "advantages", traces, "--estimator", "grpo", "--gammas", "0,1")
    assert code == 2 and "--gammas: GRPO has no gamma to sweep" in err
    code, _, err = run(capsys, "advantages", traces, "--gammas", "0,x")
    assert code == 2 and "--gammas: expected numbers" in err
    code, _, err = run(capsys, "advantages", traces, "-o", traces)
    assert code == 2 and "would overwrite the input file" in err
    # A run directory of vf-eval works as well as its traces.jsonl.
    code, _, err = run(capsys, "advantages", tmp_path, "--no-output")
    assert code == 0, err
    huge = write_episodes(tmp_path / "huge.jsonl", [make_episode([1e308, 1e308]), make_episode([0.0])])
    code, _, err = run(capsys, "advantages", huge, "--gamma", "1", "--no-output")
    assert code == 2 and "overflows float64" in err


def test_reading_holds_per_trajectory_numbers_not_episodes(tmp_path):
    """What stays in memory per episode is a few hundred bytes, not the ~9 KB episode."""
    import tracemalloc

    from verifiers_stepwise.analysis.tracefile import collect

    path = tmp_path / "traces.jsonl"
    stats = write_large_traces(path, target_bytes=3_000_000, interleave=8)
    collect([path])  # imports and caches outside the measurement
    tracemalloc.start()
    try:
        collected = collect([path])
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert collected.counts.episodes == stats["episodes"]
    assert stats["bytes"] / stats["episodes"] > 8000
    assert held / stats["episodes"] < 600


def test_doc_example_prints_the_table_shown(tmp_path, capsys, monkeypatch):
    section = (Path(__file__).resolve().parents[1] / "docs" / "vf-stepwise.md").read_text()
    block = section.split("```python\n", 1)[1].split("```", 1)[0]
    shown = section.split("```\nread 1 file(s)", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "docs/vf-stepwise.md", "exec"), {})
    monkeypatch.setenv("COLUMNS", "200")
    code, out, err = run(
        capsys,
        "advantages",
        "traces.jsonl",
        "--gamma",
        "0.4",
        "--baseline",
        "pooled",
        "--scale",
        "std",
        "--compare",
        ":baseline=per_turn",
        "--gammas",
        "0,0.4,0.8,1.0",
        "--plot",
        "credit.png",
    )
    assert code == 0, err
    printed = {line.rstrip() for line in out.splitlines()}
    for line in shown.splitlines():
        if line.startswith(("│", "scored")):
            assert line.rstrip() in printed, line
    assert Path("credit.png").stat().st_size > 20_000


# -- plot, list, flags, help ----------------------------------------------------------------


def test_plot_is_a_png_with_one_column_per_config(tmp_path, capsys):
    from matplotlib.image import imread

    traces = write_episodes(tmp_path / "traces.jsonl", rollouts(tasks=3, per_task=4))
    one, two = tmp_path / "one.png", tmp_path / "two.png"
    assert run(capsys, "advantages", traces, "--plot", one, "--no-output")[0] == 0
    assert run(capsys, "advantages", traces, "--plot", two, "--compare", "grpo", "--no-output")[0] == 0
    for png in (one, two):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    image_one, image_two = imread(one), imread(two)
    assert image_two.shape[1] > 1.6 * image_one.shape[1]  # two configs side by side
    assert image_one.shape[0] == image_two.shape[0]
    assert np.ptp(image_one[..., :3]) > 0.5  # drawn on, not blank


def test_plot_without_matplotlib_prints_the_tables_then_says_what_the_plot_needs(tmp_path, capsys, monkeypatch):
    """Issue 37: without matplotlib, ``--plot`` threw the whole analysis away (exit 2, no table).
    The tables and per-turn rows need no matplotlib: they come out, then one line says what the
    plot needs, and the exit status is 1 because a file the command was asked for is missing
    (``vf-stepwise ... --plot x.png && upload x.png`` must not go on)."""
    for module in ("matplotlib", "matplotlib.figure"):
        monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    monkeypatch.delitem(sys.modules, "verifiers_stepwise.analysis.plot", raising=False)
    traces = write_episodes(tmp_path / "traces.jsonl", rollouts())
    code, out, err = run(capsys, "advantages", traces, "--plot", tmp_path / "credit.png")
    assert code == 1
    assert "mean adv" in out and "plot:" not in out
    needs = (
        "vf-stepwise --plot (and the TRL command's reward curve) needs matplotlib, which is not installed: "
        "pip install 'verifiers-stepwise[plot]'"
    )
    assert err.splitlines() == [f"error: no plot written: {needs}"]
    assert (tmp_path / "traces.advantages.jsonl").exists() and not (tmp_path / "credit.png").exists()


@pytest.mark.slow
def test_the_guides_first_block_runs_on_the_quickstarts_run(tmp_path):
    """docs/vf-stepwise.md's first block as written, after the README quickstart's in the same
    directory (it named ``outputs/<run>/traces.jsonl``, which bash reads as a redirection)."""
    quickstart = shell_blocks("README.md", after="## Quickstart")[0]
    (guide,) = shell_blocks("docs/vf-stepwise.md")
    ran = run_block(quickstart + guide, tmp_path)
    shown = [" ".join(r.command.split()[:2]) for r in ran]
    assert shown == ["vf-eval stepwise-refine", "vf-stepwise advantages", "vf-stepwise list", "vf-stepwise advantages"]
    assert all(r.returncode == 0 for r in ran), ran
    assert "stepwise" in ran[2].stdout and "mean adv" in ran[3].stdout and "gamma sweep" in ran[3].stdout
    assert (tmp_path / "credit.png").stat().st_size > 20_000


def test_list_shows_estimators_with_fields_and_defaults(capsys):
    code, out, _ = run(capsys, "list", "--json")
    assert code == 0
    listing = json.loads(out)
    stepwise = next(e for e in listing["estimators"] if e["name"] == "stepwise")
    assert stepwise["class"] == "verifiers_stepwise.estimators.stepwise:Stepwise"
    fields = {f["name"]: f for f in stepwise["fields"]}
    assert fields["gamma"]["default"] == 1.0 and fields["gamma"]["type"] == "float"
    assert fields["baseline"]["default"] == "absorbing" and fields["scale"]["default"] == "none"
    assert fields["baseline"]["type"] == "pooled|per_turn|absorbing|leave_one_out|trajectory"
    assert "Discount" in fields["gamma"]["description"]
    assert listing["environments"]["stepwise-refine"] == "stepwise_refine"  # the bundled env
    code, out, _ = run(capsys, "list")
    assert "stepwise" in out and "grpo" in out and "turn_credit" in out and "gamma" in out and "absorbing" in out
    assert "stepwise-refine" in out


THIRD_PARTY = """
    from typing import Literal
    from verifiers_stepwise import Estimator, EstimatorConfig

    class ScaledConfig(EstimatorConfig):
        factor: float = 2.0
        '''Multiplies every reward.'''
        power: Literal[1, 2] = 1
        plot: bool = False
        '''A field whose flag the command already uses.'''

    class Scaled(Estimator):
        Config = ScaledConfig

        def batched(self, batch):
            c = self.config
            return c.factor * batch.rewards ** c.power + (100.0 if c.plot else 0.0)
"""


def test_a_third_party_estimator_gets_its_own_flags(tmp_path, capsys, monkeypatch):
    make_distribution(
        tmp_path / "site", "scaled-estimator", {ESTIMATOR_GROUP: {"scaled": "scaled_estimator:Scaled"}}, THIRD_PARTY
    )
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    traces = write_episodes(tmp_path / "traces.jsonl", [make_episode([0.5, 1.0]), make_episode([0.25])])
    with pytest.raises(SystemExit):
        main(["advantages", "--estimator", "scaled", "--help"])
    help_text = capsys.readouterr().out
    assert "--factor FLOAT" in help_text and "Multiplies every reward. (default: 2.0)" in help_text
    assert "--power {1,2}" in help_text and "--estimator-plot, --no-estimator-plot" in help_text
    code, out, err = run(
        capsys,
        "advantages",
        traces,
        "--estimator",
        "scaled",
        "--factor",
        "3",
        "--power",
        "2",
        "--estimator-plot",
        "--json",
        "-o",
        tmp_path / "rows.jsonl",
    )
    assert code == 0, err
    assert json.loads(out)["estimators"][0]["config"] == {
        "scale": "std",
        "eps": 1e-6,
        "factor": 3.0,
        "power": 2,
        "plot": True,
    }
    assert [r["advantage"] for r in read_rows(tmp_path / "rows.jsonl")] == [100.75, 103.0, 100.1875]
    code, _, err = run(capsys, "advantages", traces, "--estimator", "scaled", "--factor", "nan", "--no-output")
    assert code == 2 and "advantage nan of group 0, trajectory 0, turn 0 is not finite" in err


def test_help_loads_no_heavy_module():
    code = (
        "import sys, json\n"
        "from verifiers_stepwise.analysis.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = ('numpy', 'verifiers', 'rich', 'matplotlib', 'pydantic', 'torch')\n"
        "print(json.dumps([m for m in heavy if m in sys.modules]))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == []


# -- the console script: on a real vf-eval run, a large file, a broken file ---------------------


@pytest.fixture(scope="module")
def vf_eval_run(tmp_path_factory):
    """The real vf-eval on the bundled refine env against the local server: 3 problems x 4
    rollouts of up to 3 turns, one rollout cut by an HTTP 500 (an errored episode)."""
    from verifiers_stepwise.testing.server import ModelServer, PerRollout, Reply, scripted
    from verifiers_stepwise.testing.vf_eval import run_vf_eval

    script = scripted(
        {
            "17 * 23": PerRollout(["About 400.", "391"], ["391"], ["300", "380", "390"], ["I am not sure."]),
            "144 / 12": PerRollout(["10", "12"], ["11", "11", "12"], ["12"], ["6", Reply(fault="http_500")]),
            "2 ** 10": PerRollout(["1000", "1024"], ["512", "1000", "1024"], ["1024"], ["2000"]),
        }
    )
    tmp = tmp_path_factory.mktemp("vf_eval")
    with ModelServer(script) as server:
        return run_vf_eval(
            ["stepwise-refine", "-n", "3", "-r", "4", "--env.max-turns", "3"],
            server.base_url,
            output_dir=tmp,
            env={"HOME": str(tmp)},
        )


@pytest.mark.slow
def test_console_script_on_traces_of_a_real_vf_eval_run(vf_eval_run, tmp_path):
    episodes = vf_eval_run.episodes
    assert len(episodes) == 12 and sum(not e.ok for e in episodes) == 1
    result = console(
        "advantages",
        vf_eval_run.run_dir,
        "--compare",
        ":baseline=per_turn",
        "--json",
        "--plot",
        tmp_path / "credit.png",
        "-o",
        tmp_path / "turns.jsonl",
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["groups"] == {"count": 3, "by": {"task.key": 3}, "sizes": {"3": 1, "4": 2}, "singleton": 0}
    assert report["counts"] | {"episodes": 12, "trajectories": 11, "errored": 1} == report["counts"]
    assert (tmp_path / "credit.png").stat().st_size > 20_000

    # The library on the same episodes: score_group per task, with each config.
    rows = read_rows(tmp_path / "turns.jsonl")
    for name, estimator in (
        ("advantage", get_estimator("stepwise")),
        ("compare_advantage", get_estimator("stepwise", baseline="per_turn")),
    ):
        expected = {}
        for group in library_groups(episodes).values():
            for episode, values in zip(group, [c.advantages for c in score_group(group, estimator).values()]):
                expected.update(((episode.id, t), v) for t, v in enumerate(values))
        assert {(r["episode"], r["turn"]): r[name] for r in rows} == expected
    assert max(r["turns"] for r in rows) == 3 and len({r["reward"] for r in rows}) > 3
    assert all("turn_scores" in e.traces[0].info for e in episodes)  # refine records scores
    groups = [[read_turns(e.traces[0]).rewards for e in g if e.ok] for g in library_groups(episodes).values()]
    assert_rows_close(report["estimators"][0]["turns"], per_turn_reference(groups, get_estimator("stepwise")))


def console(*args: object, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(VF_STEPWISE), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "200"},
    )


@pytest.mark.slow
def test_console_script_on_a_generated_large_file_and_a_broken_one(tmp_path):
    traces = tmp_path / "traces.jsonl"
    stats = write_large_traces(traces, target_bytes=6_000_000, rollouts=8, interleave=16, max_turns=5)
    broken, _ = broken_file(tmp_path / "broken")
    result = console(
        "advantages",
        traces,
        broken,
        "--skip-bad",
        "--missing",
        "error",
        "--progress",
        "--gammas",
        "0,0.4,1",
        "--compare",
        ":baseline=per_turn",
        "--plot",
        tmp_path / "credit.png",
    )
    assert result.returncode == 0, result.stderr
    assert "reading traces" in result.stderr and "MB" in result.stderr  # --progress forces the bar
    assert f"{stats['episodes'] + 9:,} episodes" in result.stdout
    assert f"scored {stats['episodes'] + 5:,} trajectories" in result.stdout
    assert f"{broken}:2: not valid JSON" in result.stdout
    assert "skipped 2 malformed lines, 1 duplicate episodes" in result.stdout
    assert "gamma sweep" in result.stdout and (tmp_path / "credit.png").stat().st_size > 20_000
    rows = read_rows(tmp_path / "traces.advantages.jsonl")
    large = [r for r in rows if r["file"] == str(traces)]
    assert len(large) == stats["turns"]
    full_blocks, rest = divmod(stats["episodes"], 16 * 8)  # 16 tasks interleaved, 8 rollouts each
    assert len({r["group_id"] for r in large}) == 16 * full_blocks + min(16, rest)


@pytest.mark.parametrize("recorded", ["absent", "empty"])
def test_a_trace_without_turn_rewards_counts_as_score_group_counts_it(tmp_path, capsys, recorded):
    """One rule (credit.scored_turns) decides, in vf-stepwise and score_group alike, what a trace
    that records no per-turn rewards (no key, or ``[]``) means: by default its trace reward on its
    last turn; with ``missing="error"`` it is rejected by both."""
    group = [make_episode([0.0, 1.0], task=0, run="run-1") for _ in range(2)] + [
        make_episode([0.0, 0.0], task=0, run="run-1")
    ]
    plain = group[1].traces[0]
    if recorded == "absent":
        del plain.info["turn_rewards"], plain.info["turn_nodes"]
    else:
        plain.info["turn_rewards"], plain.info["turn_nodes"] = [], []
    path = write_episodes(tmp_path / "traces.jsonl", group)
    code, _, err = run(capsys, "advantages", path, "-o", tmp_path / "rows.jsonl")
    assert code == 0, err
    rows = read_rows(tmp_path / "rows.jsonl")
    copies = [vf.Episode.model_validate(e.model_dump()) for e in group]
    expected = [credit.advantages for credit in score_group(copies, get_estimator("stepwise")).values()]
    for episode, values in zip(group, expected):
        assert [r["advantage"] for r in rows if r["episode"] == episode.id] == pytest.approx(values)
    assert len([r for r in rows if r["episode"] == group[1].id]) == len(expected[1]) > 0

    code, _, err = run(capsys, "advantages", path, "--no-output", "--missing", "error")
    assert code == 2 and "has no info['turn_rewards']" in err
    with pytest.raises(ValueError, match="turn_rewards"):
        score_group(copies, get_estimator("stepwise"), missing="error")


def test_turn_rewards_holding_scores_are_rejected_then_read_with_the_flag(tmp_path, capsys):
    episodes = [make_episode([0.2, 0.5, 0.9], task=0), make_episode([0.0, 0.0, 0.0], task=0)]
    episodes[0].traces[0].info["turn_rewards"] = [0.2, None, 0.9]
    traces = write_episodes(tmp_path / "traces.jsonl", episodes)
    code, _, err = run(capsys, "advantages", traces, "--no-output")
    assert code != 0 and "--reading scores" in err
    code, out, err = run(capsys, "advantages", traces, "--reading", "scores", "-o", tmp_path / "t.jsonl")
    assert code == 0, err
    rewards = [r["reward"] for r in read_rows(tmp_path / "t.jsonl") if r["episode"] == episodes[0].id]
    assert rewards == pytest.approx([0.2, 0.0, 0.7])


def test_no_estimator_named_takes_the_kind_the_traces_declare_and_says_so(tmp_path, capsys):
    from verifiers_stepwise.traces import kinds

    kinds.estimator_for.cache_clear()
    episodes = rollouts(tasks=2, per_task=4)
    for episode in episodes:
        episode.traces[0].info["credit_kind"] = "refinement"
    traces = write_episodes(tmp_path / "traces.jsonl", episodes)
    code, out, err = run(capsys, "advantages", traces, "--json")
    assert code == 0, err
    assert json.loads(out)["estimators"][0]["label"].startswith("grpo(")
    assert "no estimator named; credit kind refinement -> grpo()" in err
    expected = {
        (e.id, t): a
        for group in library_groups(episodes).values()
        for e, values in zip(group, [c.advantages for c in score_group(group, "grpo").values()])
        for t, a in enumerate(values)
    }
    rows = read_rows(tmp_path / "traces.advantages.jsonl")
    assert {(row["episode"], row["turn"]): row["advantage"] for row in rows} == expected
    # a config flag configures stepwise, as --help lists its fields; two kinds in one run are refused
    assert run(capsys, "advantages", traces, "--gamma", "0.5", "--no-output", "--json")[0] == 0
    episodes[0].traces[0].info["credit_kind"] = "states"
    mixed = write_episodes(tmp_path / "mixed.jsonl", episodes)
    code, _, err = run(capsys, "advantages", mixed, "--no-output")
    assert code != 0 and "declare several kinds of credit (refinement, states): name one --estimator" in err

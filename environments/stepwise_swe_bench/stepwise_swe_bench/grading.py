"""Grading one round: the model's diff, applied to a fresh checkout, graded by swebench's rules.

A round is graded on what the model changed, never on its repository itself: its diff against
the base commit (``model_patch``) is applied to a fresh copy of the base commit
(``Sandbox.pristine``: a copy of the trusted template locally, a new container from the image
in a container runtime), so nothing else the model left behind (untracked caches, git
configuration, files outside the repository) reaches the tests. A diff that touches the test
machinery (``machinery``) is rejected before any test runs, with the reason on the round.

The eval script (from the instance, with swebench's exit-code recording added by
``make_test_spec``) then applies the hidden tests and runs FAIL_TO_PASS and PASS_TO_PASS. The
log is parsed and judged by ``swebench.harness.grading.get_eval_report``, the function the
official harness uses; nothing here re-decides what passed. What goes back to the model is a
summary (``feedback``): the failing test ids and the error lines of the log, without any line of
the hidden tests.

Round score (``reward``, the env's setting; recorded as the turn's score, so the reward of a round
is what it changed):

- ``"resolved"``: 1 if swebench reports the instance resolved (every FAIL_TO_PASS test passes and
  no PASS_TO_PASS test breaks), else 0;
- ``"partial"``: 1 if resolved; otherwise the share of FAIL_TO_PASS tests that pass, and 0 as soon
  as any PASS_TO_PASS test breaks, the log cannot be read or the diff was rejected.
"""

from __future__ import annotations

import base64
import dataclasses
import re
import shlex
import tempfile
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from .instances import SweInstance
from .machinery import check_change, needs_content, parse_raw_diff, top_level_name, top_level_names, touched_paths
from .output import KILLED, CommandResult, printable
from .sandbox import Sandbox
from .verdict import TestRun, expected, judge, make_plan, split_eval_script

__all__ = [
    "MAX_PATCH_BYTES",
    "PatchError",
    "RewardMode",
    "RoundGrade",
    "feedback",
    "grade",
    "model_patch",
    "recorded_exit_code",
    "round_score",
]

RewardMode = Literal["resolved", "partial"]
_NO_TESTS: dict[str, list[str]] = {"success": [], "failure": []}
MAX_PATCH_BYTES = 8 * 1024 * 1024
"""Largest diff a round can submit."""
# git as it runs on the model's repository: none of the repository's hooks, external diff
# drivers, text conversions or replace refs (which could make the diff differ from the files), and
# no global or system configuration (with Docker the model's commands write its $HOME, /tmp).
_GIT = (
    "GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1 "
    "git -c core.hooksPath=/dev/null -c core.fsmonitor=false --no-replace-objects"
)
_DIFF = "diff --binary --no-renames --no-ext-diff --no-textconv"
# What running the code leaves behind, never part of a diff (byte code a model adds on purpose,
# e.g. with `git add -f`, is still in its index and rejected by ``machinery``).
_GENERATED = " ".join(
    f"':(exclude,glob){g}'" for g in ("**/__pycache__/**", "**/*.py[co]", "**/.pytest_cache/**", "**/*.egg-info/**")
)
# Log lines a failure summary is made of: pytest's short summary, error and location lines;
# unittest's and Django's FAIL/ERROR headers, exception lines and frames.
_SUMMARY_LINE = re.compile(
    r"^(?:(?:FAILED|ERROR|FAIL)\b|E\s|\S+\.py:\d+: |\s*File \"|[A-Za-z_][\w.]*(?:Error|Exception|Exit)\b)"
)
_MIN_HIDDEN_LINE = 8
"""Hidden-test lines shorter than this (``)``, ``pass``) are too common to filter on."""


class PatchError(RuntimeError):
    """The model's changes could not be read from its repository."""


@dataclass(frozen=True)
class RoundGrade:
    """swebench's verdict on the model's diff at the end of a round."""

    status: str
    """``RESOLVED_FULL``, ``RESOLVED_PARTIAL`` or ``RESOLVED_NO`` (swebench's names)."""
    resolved: bool
    log_parsed: bool
    """False when the tests did not run or their output could not be read."""
    fail_to_pass: dict[str, list[str]] = field(default_factory=lambda: dict(_NO_TESTS))
    pass_to_pass: dict[str, list[str]] = field(default_factory=lambda: dict(_NO_TESTS))
    test_output: str = ""
    """The test run's output between swebench's markers (or the whole log if they are absent);
    recorded on the trace, never shown to the model."""
    failures: str = ""
    """The summary of the log the model may see: its error lines, hidden-test lines removed."""
    rejected: str | None = None
    """Why the diff was not graded (it touches the test machinery, or does not apply)."""
    run: dict[str, Any] = field(default_factory=dict)
    """Record of the grading command (duration, termination, exit code)."""
    test_exit_code: int | None = None
    """The test command's own exit status: its own sandbox call's (``verdict``), or as the eval
    script records it after the run (the script's exit code is its last step's, a
    ``git checkout``); None if the run never got there."""
    outcomes: dict[str, str] = field(default_factory=dict)
    """Each graded test's outcome as the grader's plugin reported its real copy (``passed``,
    ``failed``, ``xfailed``, ...; ``verdict`` grading only)."""
    tampered: str | None = None
    """Why the test run's verdict cannot be trusted (a decoy did not fail, the grader's report
    is missing or doubled, the exit status is 0 beside failed tests): the round scores 0."""

    @property
    def fail_to_pass_share(self) -> float:
        passed, failed = len(self.fail_to_pass["success"]), len(self.fail_to_pass["failure"])
        return passed / (passed + failed) if passed + failed else 0.0

    def record(self) -> dict[str, Any]:
        record = asdict(self)
        record["test_output"] = self.test_output[-4000:]
        record["failures"] = self.failures[-4000:]
        return record


def round_score(grade: RoundGrade, mode: RewardMode) -> float:
    """The round's score (see the module docstring)."""
    if grade.tampered is not None:
        return 0.0
    if grade.resolved:
        return 1.0
    if mode == "resolved" or not grade.log_parsed or grade.pass_to_pass["failure"]:
        return 0.0
    return grade.fail_to_pass_share


def _test_section(log: str) -> str:
    from swebench.harness.constants import END_TEST_OUTPUT, START_TEST_OUTPUT

    if START_TEST_OUTPUT in log:
        log = log.split(START_TEST_OUTPUT, 1)[1]
    return log.split(END_TEST_OUTPUT, 1)[0]


def hidden_lines(test_patch: str) -> list[str]:
    """The lines the hidden test patch adds (stripped; the short ones left out)."""
    added = (
        line[1:].strip() for line in test_patch.splitlines() if line.startswith("+") and not line.startswith("+++")
    )
    return sorted({line for line in added if len(line) >= _MIN_HIDDEN_LINE})


def failure_summary(test_output: str, hidden: list[str]) -> str:
    """The log's summary and error lines, without any line containing a hidden-test line and
    without control characters (terminal escapes, NULs)."""
    kept = []
    for line in printable(test_output).splitlines():
        if _SUMMARY_LINE.match(line) and not any(h in line for h in hidden):
            kept.append(line.rstrip())
    return "\n".join(kept)


async def model_patch(sandbox: Sandbox, base_commit: str, *, timeout_s: float) -> str:
    """The repository's changes against the base commit, new files included, as a git diff,
    without build and cache output (``__pycache__``, ``*.pyc``, ``.pytest_cache``,
    ``*.egg-info``). Staged through a throwaway index in /tmp, so the model's own index is left
    alone; files the model made unreadable to itself are made readable first (they belong to the
    diff). Nothing is written to the repository (the index and new objects go to a fresh folder
    in /tmp), so a repository that filled its disk still yields its diff. Whatever the
    repository's git configuration makes of it, this text is what is graded."""
    result = await sandbox.run(
        "chmod -R u+rwX . 2>/dev/null; t=$(mktemp -d) || exit 1; "
        'cp .git/index "$t/index" 2>/dev/null; export GIT_INDEX_FILE="$t/index"; '
        'mkdir "$t/objects"; export GIT_OBJECT_DIRECTORY="$t/objects" '
        'GIT_ALTERNATE_OBJECT_DIRECTORIES="$PWD/.git/objects"; '
        f'{_GIT} add --all -- . {_GENERATED} >/dev/null 2>"$t/err" && '
        f'{_GIT} -c core.fileMode=false {_DIFF} --cached {base_commit} 2>"$t/err" '
        '|| { echo; cat "$t/err"; rm -rf "$t"; exit 1; }; rm -rf "$t"',
        kept_bytes=MAX_PATCH_BYTES,
        timeout_s=timeout_s,
    )
    if result.exit_code != 0 or result.termination != "exit":
        raise PatchError(f"git could not read the repository's changes: {printable(result.describe())[-500:]}")
    if result.truncated:
        raise PatchError(f"the changes are larger than {MAX_PATCH_BYTES} bytes")
    return result.output


async def _blob(sandbox: Sandbox, revision: str, timeout_s: float) -> bytes:
    command = f"git show {shlex.quote(revision)} | base64 -w0"
    shown = await sandbox.run(command, kept_bytes=MAX_PATCH_BYTES, timeout_s=timeout_s)
    return base64.b64decode(shown.output.strip())


async def apply_patch(sandbox: Sandbox, patch: str, instance: SweInstance, *, timeout_s: float) -> str | None:
    """Apply ``patch`` to the fresh checkout in ``sandbox`` (index and files); why it cannot be
    graded, or None. The changes are read back with the checkout's own (trusted) git. Each step
    may take ``timeout_s`` (these are grading's steps, not the model's commands)."""
    if patch.strip():
        applied = await sandbox.run(
            f"{_GIT} apply --binary --whitespace=nowarn - && {_GIT} add --all .",
            stdin=patch.encode(),
            timeout_s=timeout_s,
        )
        if applied.exit_code != 0 or applied.termination != "exit":
            return f"the diff does not apply to the base commit: {printable(applied.output).strip()[-500:]}"
    raw = await sandbox.run(
        f"{_GIT} diff --cached --raw -z --no-renames HEAD", kept_bytes=MAX_PATCH_BYTES, timeout_s=timeout_s
    )
    if raw.exit_code != 0:
        return f"the applied diff could not be read back: {printable(raw.output).strip()[-500:]}"
    hidden = touched_paths(instance.test_patch)
    changes = parse_raw_diff(raw.output)
    base_names: frozenset[str] = frozenset()
    if any(c.added and top_level_name(c.path) for c in changes):  # else no need to list the base
        listed = await sandbox.run(
            f"{_GIT} ls-tree HEAD && {{ {_GIT} ls-tree HEAD:src 2>/dev/null | sed 's|\t|\tsrc/|'; true; }}",
            kept_bytes=MAX_PATCH_BYTES,
            timeout_s=timeout_s,
        )
        if listed.exit_code != 0:
            return f"the base commit's files could not be listed: {printable(listed.output).strip()[-500:]}"
        base_names = top_level_names(listed.output)
    reasons = []
    for change in changes:
        before = after = None
        if needs_content(change):
            before = None if change.added else await _blob(sandbox, f"HEAD:{change.path}", timeout_s)
            after = None if change.status == "D" else await _blob(sandbox, f":{change.path}", timeout_s)
        reason = check_change(change, hidden, before, after, base_names)
        if reason is not None:
            reasons.append(reason)
    if reasons:
        more = f" (and {len(reasons) - 5} more)" if len(reasons) > 5 else ""
        return "the diff changes the test machinery: " + "; ".join(reasons[:5]) + more
    return None


async def grade(
    instance: SweInstance, sandbox: Sandbox, patch: str, *, timeout_s: float, kept_log_bytes: int
) -> RoundGrade:
    """Apply ``patch`` to a fresh checkout of the base commit, run the hidden tests, grade."""
    from swebench.harness.grading import get_eval_report, get_resolution_status

    spec = instance.test_spec()
    split = split_eval_script(spec.eval_script)
    async with sandbox.pristine() as clean:
        rejected = await apply_patch(clean, patch, instance, timeout_s=timeout_s)
        if rejected is not None:
            return RoundGrade("RESOLVED_NO", False, False, rejected=rejected)
        if split is not None:
            return await _grade_with_decoys(instance, clean, split, timeout_s=timeout_s, kept_log_bytes=kept_log_bytes)
        result: CommandResult = await clean.evaluate(spec.eval_script, timeout_s=timeout_s, kept_bytes=kept_log_bytes)
    run = result.record(max_chars=1000)
    test_output = _test_section(result.output)
    failures = failure_summary(test_output, hidden_lines(instance.test_patch))
    exit_code = recorded_exit_code(result.output)
    unparsed = RoundGrade(
        "RESOLVED_NO", False, False, test_output=test_output, failures=failures, run=run, test_exit_code=exit_code
    )
    if result.termination != "exit" or result.exit_code in KILLED:
        return unparsed  # killed mid-run (by its time limit or a cap): its log is not a verdict
    with tempfile.NamedTemporaryFile("w", suffix=".log", encoding="utf-8") as log:
        log.write(result.output)
        log.flush()
        prediction = {
            "instance_id": instance.instance_id,
            "model_name_or_path": "stepwise-swe-bench",
            "model_patch": "",
        }
        report = get_eval_report(spec, prediction, log.name, include_tests_status=True)
    verdict = report[instance.instance_id]
    if "tests_status" not in verdict:
        return unparsed
    status = verdict["tests_status"]
    return RoundGrade(
        status=get_resolution_status(status),
        resolved=bool(verdict["resolved"]),
        log_parsed=True,
        fail_to_pass=status["FAIL_TO_PASS"],
        pass_to_pass=status["PASS_TO_PASS"],
        test_output=test_output,
        failures=failures,
        run=run,
        test_exit_code=exit_code,
    )


async def _grade_with_decoys(
    instance: SweInstance, clean: Sandbox, split: TestRun, *, timeout_s: float, kept_log_bytes: int
) -> RoundGrade:
    """``verdict``'s grading: the set-up, then the test command in a call of its own with the
    round's plan, judged from the plugin's report (real copies) and the decoys' outcomes."""
    from swebench.harness.grading import get_resolution_status

    setup = await clean.evaluate(split.setup, timeout_s=timeout_s, kept_bytes=kept_log_bytes)
    if setup.termination != "exit":
        return RoundGrade("RESOLVED_NO", False, False, test_output=setup.output, run=setup.record(max_chars=1000))
    plan = make_plan([*instance.FAIL_TO_PASS, *instance.PASS_TO_PASS])
    result = await clean.evaluate(split.command, timeout_s=timeout_s, kept_bytes=kept_log_bytes, stdin=plan.payload())
    run = result.record(max_chars=1000)
    test_output = plan.readable(result.output)
    failures = failure_summary(test_output, hidden_lines(instance.test_patch))
    code = result.exit_code if result.termination == "exit" and result.exit_code not in KILLED else None
    unparsed = RoundGrade(
        "RESOLVED_NO", False, False, test_output=test_output, failures=failures, run=run, test_exit_code=code
    )
    if result.termination != "exit" or result.exit_code in KILLED:
        return unparsed  # killed mid-run (by its time limit or a cap): its log is not a verdict
    gold_xfail = set(instance.GOLD_XFAIL)
    outcomes, tampered = judge(plan, result.output, gold_xfail, exit_code=code)
    unparsed = dataclasses.replace(unparsed, outcomes=outcomes)
    if tampered is not None:
        return dataclasses.replace(unparsed, log_parsed=bool(outcomes), tampered=tampered)

    def split_by_outcome(tests: list[str]) -> dict[str, list[str]]:
        passes = {t for t in tests if outcomes[t] == expected(t, gold_xfail)}
        return {"success": [t for t in tests if t in passes], "failure": [t for t in tests if t not in passes]}

    status = {
        "FAIL_TO_PASS": split_by_outcome(instance.FAIL_TO_PASS),
        "PASS_TO_PASS": split_by_outcome(instance.PASS_TO_PASS),
    }
    resolution = get_resolution_status(status)
    return dataclasses.replace(
        unparsed,
        status=resolution,
        resolved=resolution == "RESOLVED_FULL",
        log_parsed=True,
        fail_to_pass=status["FAIL_TO_PASS"],
        pass_to_pass=status["PASS_TO_PASS"],
    )


def recorded_exit_code(log: str) -> int | None:
    """The exit status the eval script echoes after its test command. The last such line: the
    code under test runs, and can print a line like it, before the script does."""
    from swebench.harness.grading import TEST_EXIT_CODE_RE

    codes = TEST_EXIT_CODE_RE.findall(log)
    return int(codes[-1]) if codes else None


def feedback(grade: RoundGrade, *, round_index: int, rounds_left: int, max_log_chars: int) -> str:
    """The user message that opens the next round after an unresolved one: the verdict, the
    failing test ids and the end of the failure summary (never the hidden tests)."""
    lines = [f"Round {round_index + 1} was graded: the issue is not resolved yet."]
    if grade.tampered is not None:
        code = grade.test_exit_code
        status = "the test command did not finish" if code is None else f"the test command exited with code {code}"
        lines = [f"Round {round_index + 1} scored 0: {grade.tampered} ({status})."]
    elif grade.rejected is not None:
        lines = [
            f"Round {round_index + 1} was not graded: {grade.rejected}. Your diff against the base "
            "commit is graded on a fresh checkout; it may change the code, not the tests, conftest.py, "
            "pytest's configuration, byte code, compiled modules, package metadata, start-up hooks or "
            "symbolic links, and it may add files only inside the repository's existing top-level packages "
            "and modules (or where no import reaches). "
            "Remove those changes."
        ]
    elif not grade.log_parsed:
        why = grade.run.get("termination", "unknown")
        if why == "exit" and grade.run.get("exit_code") in KILLED:
            why = "killed by SIGKILL, as at the episode's memory cap"
        code = grade.test_exit_code
        status = "the test command did not finish" if code is None else f"the test command exited with code {code}"
        lines.append(f"The tests could not be run or their output could not be read ({why}; {status}).")
    else:
        f2p_total = len(grade.fail_to_pass["success"]) + len(grade.fail_to_pass["failure"])
        lines.append(f"Tests that must start passing: {len(grade.fail_to_pass['success'])}/{f2p_total} pass.")
        if grade.fail_to_pass["failure"]:
            lines.append("Still failing:\n" + "\n".join(f"- {t}" for t in grade.fail_to_pass["failure"]))
        if grade.pass_to_pass["failure"]:
            lines.append(
                "Tests that passed before your change and now fail:\n"
                + "\n".join(f"- {t}" for t in grade.pass_to_pass["failure"])
            )
    excerpt = grade.failures.strip()[-max_log_chars:] if max_log_chars else ""
    if excerpt:
        lines.append(f"Errors from the test run:\n```\n{excerpt}\n```")
    lines.append(
        f"Keep working on the repository and call `submit` again when done "
        f"({rounds_left} round{'s' if rounds_left != 1 else ''} left)."
    )
    return "\n\n".join(lines)

"""Grading one round: run the instance's eval script in the sandbox, grade with swebench's rules.

The eval script (from the instance, with swebench's exit-code recording added by
``make_test_spec``) applies the hidden tests and runs FAIL_TO_PASS and PASS_TO_PASS. The log is
parsed and judged by ``swebench.harness.grading.get_eval_report``, the function the official
harness uses; nothing here re-decides what passed.

Round reward (``reward``):

- ``"resolved"``: 1 if swebench reports the instance resolved (every FAIL_TO_PASS test passes and
  no PASS_TO_PASS test breaks), else 0;
- ``"partial"``: 1 if resolved; otherwise the share of FAIL_TO_PASS tests that pass, and 0 as soon
  as any PASS_TO_PASS test breaks or the log cannot be read.
"""

from __future__ import annotations

import tempfile
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from .instances import SweInstance
from .output import CommandResult
from .sandbox import Sandbox

__all__ = ["RewardMode", "RoundGrade", "feedback", "grade", "model_patch", "round_reward"]

RewardMode = Literal["resolved", "partial"]
_NO_TESTS: dict[str, list[str]] = {"success": [], "failure": []}


@dataclass(frozen=True)
class RoundGrade:
    """swebench's verdict on the repository at the end of a round."""

    status: str
    """``RESOLVED_FULL``, ``RESOLVED_PARTIAL`` or ``RESOLVED_NO`` (swebench's names)."""
    resolved: bool
    log_parsed: bool
    """False when the tests could not run or their output could not be read."""
    fail_to_pass: dict[str, list[str]] = field(default_factory=lambda: dict(_NO_TESTS))
    pass_to_pass: dict[str, list[str]] = field(default_factory=lambda: dict(_NO_TESTS))
    test_output: str = ""
    """The test run's output between swebench's markers (or the whole log if they are absent)."""
    run: dict[str, Any] = field(default_factory=dict)
    """Record of the grading command (duration, termination, exit code)."""

    @property
    def fail_to_pass_share(self) -> float:
        passed, failed = len(self.fail_to_pass["success"]), len(self.fail_to_pass["failure"])
        return passed / (passed + failed) if passed + failed else 0.0

    def record(self) -> dict[str, Any]:
        record = asdict(self)
        record["test_output"] = self.test_output[-4000:]
        return record


def round_reward(grade: RoundGrade, mode: RewardMode) -> float:
    """The round's reward (see the module docstring)."""
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


async def model_patch(sandbox: Sandbox, base_commit: str, max_bytes: int = 200_000) -> str:
    """The repository's changes against the base commit, new files included, as a git diff.
    Staged through a throwaway index in /tmp, so the model's own index is left alone."""
    result = await sandbox.run(
        "cp .git/index /tmp/vf-index 2>/dev/null; export GIT_INDEX_FILE=/tmp/vf-index; "
        "git add --all . >/dev/null 2>&1 && "
        f"git -c core.fileMode=false diff --cached --binary {base_commit}",
    )
    return result.output[:max_bytes] if result.exit_code == 0 else ""


async def grade(instance: SweInstance, sandbox: Sandbox, *, timeout_s: float, kept_log_bytes: int) -> RoundGrade:
    """Run the hidden tests against the repository's current state and grade them."""
    from swebench.harness.grading import get_eval_report, get_resolution_status

    spec = instance.test_spec()
    result: CommandResult = await sandbox.evaluate(spec.eval_script, timeout_s=timeout_s, kept_bytes=kept_log_bytes)
    run = result.record(max_chars=1000)
    test_output = _test_section(result.output)
    unparsed = RoundGrade("RESOLVED_NO", False, False, test_output=test_output, run=run)
    if result.termination == "timeout":
        return unparsed
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
        run=run,
    )


def feedback(grade: RoundGrade, *, round_index: int, rounds_left: int, max_log_chars: int) -> str:
    """The user message that opens the next round after an unresolved one."""
    lines = [f"Round {round_index + 1} was graded: the issue is not resolved yet."]
    if not grade.log_parsed:
        lines.append(
            "The tests could not be run or their output could not be read "
            f"({grade.run.get('termination', 'unknown')}, exit code "
            f"{grade.run.get('exit_code', '?')})."
        )
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
    excerpt = grade.test_output.strip()[-max_log_chars:]
    if excerpt:
        lines.append(f"End of the test log:\n```\n{excerpt}\n```")
    lines.append(
        f"Keep working on the repository and call `submit` again when done "
        f"({rounds_left} round{'s' if rounds_left != 1 else ''} left)."
    )
    return "\n\n".join(lines)

"""The verdict: which graded tests passed, from a run whose outcomes the code under test cannot
forge without also forging decoys it cannot tell from them.

For an instance graded by pytest, the eval script is split in two sandbox calls
(``split_eval_script``): its set-up (everything before swebench's start marker: checkout, hidden
tests applied) and the test command alone, whose exit status is that call's own. The test
command runs pytest through ``BOOTSTRAP`` with the grader's plugin (``plugin``) and the round's
plan on stdin.

The plan comes from a secret drawn per round on the host (``secrets.token_bytes``), never
written anywhere: each graded test ``t`` is run twice, as ``test_<HMAC(secret, "real" + t)>``
and as ``test_<HMAC(secret, "decoy" + t)>`` (16 hex digits each), with a 16-byte key from the
same HMAC that both copies use to place each equality's own comparison among others that
replace one side with its neighbours. A decoy passes if some equality held every way
(``plugin``), so an honest run reports it FAILED whether or not the fix is right. The plugin
prints one report line of outcomes; stdout is not parsed otherwise.

A test counts as passing only when its real copy reports what the gold patch's run reports
(``expected``): ``passed``, or ``xfailed`` for a test the instance's record of that run lists
(``SweInstance.GOLD_XFAIL``). Any decoy whose outcome is not one an honest run gives
(``HONEST_DECOY``; and ``xfailed`` for those tests, whose xfail marker turns the decoy's failure
into an xfail), a missing report or more than one means the verdict cannot be trusted: the
round scores 0, the reason on ``RoundGrade.tampered``. So does an exit status of 0 beside a report
of failed tests (pytest exits 1 when any test fails; an honest run's decoys always do): an exit
hook or ``os._exit(0)`` after the report forged it.

Nothing here imports the environment: the verdict is ``split_eval_script``, ``make_plan``,
``Plan.payload`` for the sandbox and ``judge`` for the report.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import shlex
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

__all__ = ["BOOTSTRAP", "HONEST_DECOY", "Plan", "TestRun", "expected", "judge", "make_plan", "split_eval_script"]

_PLUGIN = Path(__file__).with_name("plugin.py")
VERDICT_MARK = "STEPWISE-VERDICT"
"""Must match ``plugin.VERDICT_MARK``."""
_PLUGIN_FILE = "<stepwise-verdict>"
_SECTION = re.compile(r"^(?:_{3,}|={3,}) ")
"""pytest's section headers: a failure's (``____ name ____``) or a summary's (``==== ... ====``)."""
_START, _END = ": '>>>>> Start Test Output'", ": '>>>>> End Test Output'"
_ENVIRONMENT = ("source ", ". ", "conda activate", "export ", "cd ")
"""Set-up lines that the test command's own call repeats (its environment, not its effects)."""
HONEST_DECOY = ("failed", "error", "not-collected", "no-decoy")
"""A decoy's outcomes in an honest run: it failed (or its fixtures did), or it was never made
(its test was not collected, or is not a plain function: unittest, async)."""
BOOTSTRAP = (
    "def _run():\n"
    "    import builtins, json, sys, types\n"
    "    payload = json.loads(sys.stdin.buffer.read())\n"
    "    sys.stdin.close()\n"
    "    plugin = types.ModuleType('stepwise_verdict')\n"
    "    plugin.__builtins__ = dict(builtins.__dict__)\n"
    f"    exec(compile(payload.pop('plugin'), '{_PLUGIN_FILE}', 'exec'), plugin.__dict__)\n"
    "    plugin.load(payload)\n"
    "    import pytest\n"
    "    return pytest.main(sys.argv[1:], plugins=[plugin])\n"
    "import sys\n"
    "sys.exit(_run())\n"
)
"""Run as ``python -c BOOTSTRAP ARGS``: reads the plugin and the plan from stdin, runs the plugin
(which binds what it uses and reads the tests' source) with a copy of the builtins, all before
pytest collects and so before any code under test is imported; then runs pytest with it. The
plugin and the plan live in that function's frame, not in ``__main__``'s namespace."""


@dataclass(frozen=True)
class TestRun:
    """An eval script split for the verdict: ``setup`` (a script), ``command`` (the test call)."""

    setup: str
    command: str


def split_eval_script(script: str) -> TestRun | None:
    """The script's set-up and its pytest command rewritten to run through ``BOOTSTRAP``; None
    when the test section is not a single pytest command (then the script runs as it is)."""
    lines = script.splitlines()
    if _START not in lines or _END not in lines:
        return None
    start, end = lines.index(_START), lines.index(_END)
    section = [
        line for line in lines[start + 1 : end] if line.strip() and not line.startswith("SWEBENCH_TEST_EXIT_CODE=")
    ]
    if len(section) != 1:
        return None
    words = shlex.split(section[0])
    at = next((i for i, word in enumerate(words) if word == "pytest" or word.endswith("/pytest")), None)
    if at is None:
        return None
    if at >= 2 and words[at - 1] == "-m":
        prefix, python = words[: at - 2], words[at - 2]
    else:
        prefix, python = words[:at], "python"
    command = shlex.join([*prefix, python, "-c", BOOTSTRAP, *words[at + 1 :]])
    environment = [line for line in lines[:start] if line.startswith(_ENVIRONMENT)]
    return TestRun("\n".join(lines[:start]) + "\n", "\n".join(["set -uo pipefail", *environment, command]) + "\n")


@dataclass(frozen=True)
class Plan:
    """Each graded test's two names (``real``, ``decoy``) and the key that places each of its
    equalities' own comparison among the others (``key``, 16 bytes in hex)."""

    tests: tuple[dict, ...]

    def payload(self) -> bytes:
        """What the test command reads on stdin: the plugin's source and the plan."""
        return json.dumps({"plugin": _PLUGIN.read_text(encoding="utf-8"), "tests": list(self.tests)}).encode()

    def real_names(self) -> dict[str, str]:
        return {entry["real"]: entry["id"] for entry in self.tests}

    def decoy_names(self) -> dict[str, str]:
        return {entry["decoy"]: entry["id"] for entry in self.tests}

    def readable(self, output: str) -> str:
        """The test output as the model may see it: real copies under their tests' names,
        decoys' sections and lines, the plugin's frames and its report left out."""
        real = {name: test.rsplit("::", 1)[-1] for name, test in self.real_names().items()}
        decoys = tuple(self.decoy_names())
        kept, in_decoy = [], False
        for line in output.splitlines():
            if _SECTION.match(line):
                in_decoy = any(name in line for name in decoys)
            if (
                in_decoy
                or any(name in line for name in decoys)
                or _PLUGIN_FILE in line
                or line.startswith(VERDICT_MARK)
            ):
                continue
            for name, test in real.items():
                line = line.replace(name, test)
            kept.append(line)
        return "\n".join(kept)


def make_plan(test_ids: list[str], secret: bytes | None = None) -> Plan:
    """The round's plan from a fresh secret (``secret`` only for tests)."""
    key = secret if secret is not None else secrets.token_bytes(32)

    def mac(kind: str, test: str) -> str:
        return hmac.new(key, f"{kind}\0{test}".encode(), hashlib.sha256).hexdigest()

    tests = []
    for test in dict.fromkeys(test_ids):
        tests.append(
            {
                "id": test,
                "real": f"test_{mac('real', test)[:16]}",
                "decoy": f"test_{mac('decoy', test)[:16]}",
                "key": mac("draws", test)[:32],
            }
        )
    return Plan(tuple(tests))


def expected(test: str, gold_xfail: Collection[str]) -> str:
    """The outcome that makes ``test`` a pass: the gold patch's run's (``passed`` unless the
    instance records it as XFAIL there)."""
    return "xfailed" if test in gold_xfail else "passed"


def judge(
    plan: Plan, output: str, gold_xfail: Collection[str] = (), exit_code: int | None = None
) -> tuple[dict[str, str], str | None]:
    """Each graded test's outcome (its real copy's; ``missing`` if not reported) and why the run
    is not to be trusted, or None. ``gold_xfail``: the tests the gold patch's run reports XFAIL;
    ``exit_code``: the test command's own exit status (pytest exits non-zero whenever a test it
    reported failed or errored, so 0 beside such a report is a forged status)."""
    reports = [line for line in output.splitlines() if line.startswith(f"{VERDICT_MARK} ")]
    if not reports:
        return {}, "the test run ended without the grader's report of its tests"
    if len(reports) > 1:
        return {}, f"the test run printed {len(reports)} reports of its tests where the grader prints one"
    pairs = [field.partition("=") for field in reports[0][len(VERDICT_MARK) + 1 :].split()]
    if not all(sep for _, sep, _ in pairs):
        return {}, "the test run's verdict report is not readable"
    outcomes = {name: outcome for name, _, outcome in pairs}
    tests = {test: outcomes.get(name, "missing") for name, test in plan.real_names().items()}
    decoys = {test: outcomes.get(name, "missing") for name, test in plan.decoy_names().items()}
    # A test that xfails under gold is marked so: its decoy's failure is reported as an xfail.
    wrong = sorted(
        f"{test} ({outcome})"
        for test, outcome in decoys.items()
        if outcome not in HONEST_DECOY and not (outcome == "xfailed" and test in gold_xfail)
    )
    if wrong:
        more = f" and {len(wrong) - 3} more" if len(wrong) > 3 else ""
        return tests, (
            "decoy tests whose expectations are wrong on purpose did not fail as they do in an honest run "
            f"(or were not made, or compared nothing), so the test run was tampered with: decoys of "
            f"{', '.join(wrong[:3])}{more}"
        )
    if exit_code == 0 and any(outcome in ("failed", "error") for outcome in outcomes.values()):
        return tests, "the test command exited 0 although its report has failed tests, so its exit status was forged"
    return tests, None

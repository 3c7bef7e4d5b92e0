"""End to end: what a graded diff may add, attacked through a real ``vf-eval``.

One run of the bundled task stepwise__csvline-7: the gold fix (the control, reward 1) and three
rollouts that add something the import system or pytest loads without touching the package
under test (issue 23: each passed the old per-name rule). Each must score 0 with the reason on
its round (``rejected``), before any test runs.
"""

from __future__ import annotations

import pytest
from stepwise_swe_bench.instances import load_instances

from verifiers_stepwise.testing.server import Reply, ToolCallReply

from .csvline_runs import TASK, graded_rounds

pytestmark = pytest.mark.slow

PASS_ALL = (
    "import pytest\n\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
    "    outcome = yield\n    outcome.get_result().outcome = 'passed'\n"
)
EXTENSION = "$(python -c 'import importlib.machinery as m; print(m.EXTENSION_SUFFIXES[0])')"
ATTACKS = {
    # A compiled module in the repository root named like a standard-library module pytest imports.
    "compiled-stdlib": ([f"printf x > fnmatch{EXTENSION}"], "fnmatch.cpython-"),
    # A new top-level package named like a module pytest imports when it is there.
    "new-package": (["mkdir pygments && printf 'raise ImportError\\n' > pygments/__init__.py"], "pygments"),
    # A pytest plugin's metadata whose suffix differs only in case (importlib.metadata finds it).
    "metadata-case": (
        [
            "mkdir PASSALL-1.0.DIST-INFO && printf 'Metadata-Version: 2.1\\nName: passall\\nVersion: 1.0\\n' "
            "> PASSALL-1.0.DIST-INFO/METADATA && printf '[pytest11]\\npassall = csvline.passall\\n' "
            "> PASSALL-1.0.DIST-INFO/entry_points.txt",
            f"cat > csvline/passall.py <<'EOF'\n{PASS_ALL}EOF",
        ],
        "PASSALL-1.0.DIST-INFO",
    ),
}
REASONS = {
    "compiled-stdlib": "is a compiled module",
    "new-package": "adds the top-level importable name 'pygments'",
    "metadata-case": "is package metadata",
}


def call(name: str, **arguments) -> Reply:
    return Reply(tool_calls=[ToolCallReply(name, arguments)])


def plan(commands: list[str]) -> list:
    return [*(call("bash", command=c) for c in commands), call("submit"), "Done."]


@pytest.fixture(scope="module")
def rounds(tmp_path_factory) -> dict[str, dict]:
    """Each rollout's one graded round (with its turn rewards), by attack name or ``gold``."""
    (instance,) = load_instances(instance_ids=[TASK])
    plans = [plan([f"git apply <<'EOF'\n{instance.patch}EOF"]), *(plan(c) for c, _ in ATTACKS.values())]
    found = graded_rounds(
        tmp_path_factory.mktemp("home"),
        plans,
        lambda patch: next((n for n, (_, path) in ATTACKS.items() if f"b/{path}" in patch), "gold"),
    )
    assert sorted(found) == sorted([*ATTACKS, "gold"])
    return found


def test_the_gold_fix_scores_1_in_the_same_run(rounds):
    control = rounds["gold"]
    assert control["turn_rewards"] == [1.0] and control["resolved"] and control["rejected"] is None


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_an_addition_the_import_system_or_pytest_loads_scores_0_with_the_reason(rounds, name):
    graded = rounds[name]
    assert graded["turn_rewards"] == [0.0] and not graded["resolved"]
    assert graded["rejected"] is not None and REASONS[name] in graded["rejected"], graded["rejected"]
    assert graded["outcomes"] == {} and graded["test_output"] == ""  # rejected before any test ran

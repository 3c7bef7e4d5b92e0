"""The SWE-bench taskset: one task per instance, its repository prepared at setup.

Task setup puts the repository at its base commit in the rollout's runtime (``box``), starts the
step and time budget and hands both to the eval's tool server through the rollout's shared
state. The task keeps its own sandbox per rollout for the environment, which grades with it
after every round.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time

import verifiers.v1 as vf
from pydantic import Field

from .box import close_box, prepare_box
from .instances import BUNDLED, SweInstance, load_instances
from .limits import SandboxLimits
from .sandbox import Sandbox, SandboxUnavailable, mode, unenforced
from .state import Budget, SweBenchState
from .toolset import SweToolset

__all__ = [
    "PROMPT",
    "SWE_INFO",
    "SweBenchTask",
    "SweBenchTaskConfig",
    "SweBenchTaskData",
    "SweBenchTaskset",
    "SweBenchTasksetConfig",
    "TestRunnerMissing",
    "check_docker",
    "check_test_runner",
]

_log = logging.getLogger(__name__)
SWE_INFO = "swe_bench"
"""The ``trace.info`` key of an episode's SWE-bench record: graded rounds, steps, tool calls."""

PROMPT = """\
You are working on the repository {repo}, checked out at /testbed.

<issue>
{problem_statement}
</issue>

Change the repository so that the issue is resolved. Hidden tests will check your change, and \
the repository's existing tests must keep passing. Tools: `bash` (runs a command in /testbed, \
without network access), `view`, `edit` and `create` (files), and `submit`. When you are done, \
call `submit`, then reply with a one-line summary of your change."""


class SweBenchTaskData(vf.TaskData):
    instance: SweInstance


class SweBenchTaskConfig(vf.TaskConfig):
    sandbox: SandboxLimits = SandboxLimits()
    """Where the model's commands and grading run, and their caps (``--env.taskset.task.sandbox.*``)."""
    budget: Budget = Budget()
    """Step and time limits per round and per episode (``--env.taskset.task.budget.*``)."""
    grading_timeout_s: float = Field(1800.0, gt=0)
    """Wall-clock limit of one grading run (the hidden tests)."""
    grading_log_bytes: int = Field(4 * 1024 * 1024, gt=0)
    """Test log kept for grading: the first and last halves of this many bytes."""


class SweBenchTask(vf.Task[SweBenchTaskData, SweBenchState, SweBenchTaskConfig]):
    def __init__(self, data: SweBenchTaskData, config: SweBenchTaskConfig | None = None) -> None:
        super().__init__(data, config)
        self._sandboxes: dict[str, Sandbox] = {}

    @property
    def key(self) -> str:
        return self.data.instance.instance_id

    async def setup(self, trace: vf.Trace, runtime: vf.Runtime) -> None:
        start = time.perf_counter()
        box, sandbox = await prepare_box(runtime, self.data.instance, self.config.sandbox)
        # This hook's part of the rollout's setup (``trace.timing.setup`` times all of it).
        trace.info.setdefault(SWE_INFO, {})["setup_s"] = round(time.perf_counter() - start, 4)
        self._sandboxes[trace.id] = sandbox
        state = trace.state
        state.box, state.budget = box, self.config.budget
        now = time.time()
        state.episode_deadline = now + state.budget.episode_timeout_s
        state.start_round(0, now)

    def sandbox(self, trace: vf.Trace) -> Sandbox:
        """The sandbox over this rollout's repository (for grading)."""
        try:
            return self._sandboxes[trace.id]
        except KeyError:
            raise RuntimeError(f"rollout {trace.id} has no prepared repository") from None

    async def finalize(self, trace: vf.Trace, runtime: vf.Runtime) -> None:
        self._sandboxes.pop(trace.id, None)
        state = trace.state
        info = trace.info.setdefault(SWE_INFO, {})
        info.update(steps=state.steps, tool_calls=state.records)
        if state.box is not None:
            await close_box(state.box)

    @vf.stop
    def out_of_budget(self, trace: vf.Trace) -> bool:
        """The episode's step or time budget is used up."""
        return trace.state.exhausted()

    @vf.reward
    async def resolved(self, trace: vf.Trace) -> float:
        """1 if the last graded round resolved the issue (swebench's verdict)."""
        rounds = trace.info.get(SWE_INFO, {}).get("rounds", [])
        return 1.0 if rounds and rounds[-1]["resolved"] else 0.0

    @vf.metric
    async def rounds(self, trace: vf.Trace) -> float:
        return float(len(trace.info.get(SWE_INFO, {}).get("rounds", [])))

    @vf.metric
    async def steps(self, trace: vf.Trace) -> float:
        """Tool calls counted against the budget (``submit`` is free)."""
        return float(trace.info.get(SWE_INFO, {}).get("steps", 0))


class SweBenchTasksetConfig(vf.TasksetConfig):
    task: SweBenchTaskConfig = SweBenchTaskConfig()
    source: str = BUNDLED
    """``fixtures`` (bundled, offline), ``verified``, ``lite``, ``full``, a Hugging Face dataset
    id, or a local .json/.jsonl/.parquet file of SWE-bench rows."""
    split: str = "test"
    instance_ids: list[str] | None = None
    """Only these instances (unknown ids are an error)."""


class SweBenchTaskset(vf.Taskset[SweBenchTask, SweBenchTasksetConfig]):
    @classmethod
    def toolsets(cls, config: SweBenchTasksetConfig) -> list[vf.Toolset]:
        """The model's tools: one server for the whole eval, which finds each call's repository
        in the calling rollout's state (see ``toolset``), so no rollout waits for one to start."""
        return [SweToolset(vf.SharedToolsetConfig())]

    def load(self) -> list[SweBenchTask]:
        instances = load_instances(self.config.source, self.config.split, self.config.instance_ids)
        limits = self.config.task.sandbox
        if limits.engine == "docker":
            check_docker(bundled=any(instance.image is None for instance in instances))
        else:
            if any(instance.image is not None for instance in instances):
                raise SandboxUnavailable(
                    f"{self.config.source}: SWE-bench instances run in their images: use Docker "
                    "(--env.taskset.task.sandbox.engine docker)"
                )
            check_test_runner(sys.executable)  # what the bubblewrap sandbox grades with (``box``)
            if missing := unenforced(limits.engine):
                _log.warning(
                    "stepwise-swe-bench in bubblewrap (%s) does not enforce these caps: %s",
                    mode(limits.engine),
                    "; ".join(missing),
                )
        return [SweBenchTask(task_data(instance), self.config.task) for instance in instances]


def check_docker(bundled: bool) -> None:
    """Raise ``SandboxUnavailable`` unless a Docker engine answers and, for the bundled tasks
    (``bundled``), holds their image."""
    from . import image
    from .docker import engine_check

    engine_check()
    if bundled and not image.present(image.TAG):
        raise SandboxUnavailable(
            f"the bundled tasks run in the image {image.TAG}, which Docker does not hold: build it once with "
            "`python -m stepwise_swe_bench.image` (as root; needs debootstrap, ~1-3 min), or run them in "
            "bubblewrap (--env.taskset.task.sandbox.engine bwrap)"
        )


class TestRunnerMissing(RuntimeError):
    """The interpreter that grades the local tasks cannot run their test runner."""

    __test__ = False  # not a pytest test class, despite its name


def check_test_runner(python: str) -> None:
    """Raise ``TestRunnerMissing`` unless ``python`` runs pytest, the runner of the local tasks'
    eval scripts (``python -m pytest``). The bubblewrap sandbox runs them with this interpreter's
    environment and an empty one of its own, so the check runs it the same way: without it,
    every hidden test would fail to start and every round would score 0 for no fault of the
    model's."""
    try:
        done = subprocess.run(
            [python, "-m", "pytest", "--version"],
            env={"PATH": os.defpath},
            capture_output=True,
            text=True,
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        why = str(error)
    else:
        if done.returncode == 0:
            return
        why = (done.stderr.strip() or done.stdout.strip() or f"exit code {done.returncode}").splitlines()[-1]
    raise TestRunnerMissing(
        f"stepwise-swe-bench grades its local tasks with pytest (`python -m pytest`) in the environment "
        f"of {python}, which cannot run it ({why}). Install the bundle with its dependencies "
        f"(`pip install ./environments/stepwise_swe_bench`), or pytest itself: `{python} -m pip install pytest`."
    )


def task_data(instance: SweInstance) -> SweBenchTaskData:
    """The task row: the prompt the model sees, and the instance."""
    return SweBenchTaskData(
        id=instance.instance_id,
        name=instance.instance_id,
        prompt=PROMPT.format(repo=instance.repo, problem_statement=instance.problem_statement.strip()),
        instance=instance,
    )

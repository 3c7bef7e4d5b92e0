"""Loading the host trainers for the adapter tests, and a third-party estimator.

torchtitan 0.3.0's ``torchtitan/experiments/rl/__init__.py`` only sets
``PYTORCH_CUDA_ALLOC_CONF`` and re-exports two vLLM helpers, and so imports vLLM, which needs a
GPU build and is not installed here. The adapter and these tests use only submodules that never
import vLLM (``rollout.*``, ``components.training_sample_builder``, ``environment.*``,
``rubrics``, ``examples.dapo_math.{data,env,rubric,rollouter}``). When vLLM is absent, the
package module is created from its real import spec without executing that ``__init__``; every
submodule then imports and runs unchanged from the installed torchtitan. With vLLM installed,
nothing is done and the package imports normally.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import textwrap
from pathlib import Path

import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: slower than ~5 s (the fast loop is -m 'not slow')")


_PACKAGE = "torchtitan.experiments.rl"

if (
    _PACKAGE not in sys.modules
    and importlib.util.find_spec("torchtitan") is not None  # absent in .ci/run's prime-rl environment
    and importlib.util.find_spec("vllm") is None
):
    _spec = importlib.util.find_spec(_PACKAGE)
    sys.modules[_PACKAGE] = importlib.util.module_from_spec(_spec)  # __path__ set, __init__ not run

# prime-rl is git-only (not on PyPI). STEPWISE_PRIME_RL=/path/to/prime-rl (a checkout or the
# extracted 559b447 tree, with prime-rl's pinned verifiers installed) puts its sources on
# sys.path; STEPWISE_REQUIRE_PRIME_RL=1 (set by .ci/run's host-contract environment) makes a
# missing or broken prime-rl an error instead of a skip. Without prime-rl the adapter runs on
# a stand-in for its two base classes, and the tests that need prime-rl itself skip.
PRIME_RL_VAR = "STEPWISE_PRIME_RL"
REQUIRE_VAR = "STEPWISE_REQUIRE_PRIME_RL"
# The prime-rl modules the host-contract tests call into.
PRIME_RL_MODULES = (
    "prime_rl.configs.rl",
    "prime_rl.orchestrator.algo",
    "prime_rl.orchestrator.trajectories",
    "prime_rl.orchestrator.train_sink",
    "prime_rl.entrypoints.rl",
    "prime_rl.entrypoints.env_server",
)


def _load_prime_rl() -> str | None:
    """Import prime-rl; None when it imports, else why not (raised under REQUIRE_VAR)."""
    checkout = os.environ.get(PRIME_RL_VAR)
    if checkout:
        roots = [Path(checkout, "src"), Path(checkout, "packages", "prime-rl-configs", "src")]
        missing = [str(root) for root in roots if not (root / "prime_rl").is_dir()]
        if missing:
            problem = f"{PRIME_RL_VAR}={checkout} is not a prime-rl checkout (no prime_rl under {missing})"
            if os.environ.get(REQUIRE_VAR):
                raise RuntimeError(problem)
            return problem
        sys.path[:0] = [str(root) for root in roots if str(root) not in sys.path]
    try:
        for module in PRIME_RL_MODULES:
            importlib.import_module(module)
    except ImportError as error:
        if os.environ.get(REQUIRE_VAR):
            raise RuntimeError(f"{REQUIRE_VAR} is set but prime-rl does not import: {error!r}") from error
        found = "prime_rl" in sys.modules
        for name in [name for name in sys.modules if name == "prime_rl" or name.startswith("prime_rl.")]:
            del sys.modules[name]  # a half-imported prime-rl must not shadow the stand-in
        state = f"prime-rl does not import ({error})" if found else "prime-rl is not installed (git only, not on PyPI)"
        return f"{state}; set {PRIME_RL_VAR}=/path/to/prime-rl, with prime-rl's pinned verifiers installed, to run them"
    return None


PRIME_RL_MISSING = _load_prime_rl()
REAL_PRIME_RL = PRIME_RL_MISSING is None
needs_prime_rl = pytest.mark.skipif(not REAL_PRIME_RL, reason=PRIME_RL_MISSING or "")
if not REAL_PRIME_RL:
    from tests.hosts import prime_rl_standin

    prime_rl_standin.install()


_THIRD_PARTY = '''
import numpy as np

from verifiers_stepwise.estimators import Estimator, EstimatorConfig


class LastTurnConfig(EstimatorConfig):
    bonus: float = 0.0


class LastTurnOnly(Estimator):
    """A third-party estimator: the group-centred reward of each trajectory's last turn,
    on its last turn only (plus ``bonus``), 0 elsewhere."""

    Config = LastTurnConfig

    def batched(self, batch):
        last = batch.trajectory_ends - 1
        centred = batch.rewards[last] - np.repeat(
            np.add.reduceat(batch.rewards[last], batch.group_starts) / batch.group_sizes,
            batch.group_sizes,
        )
        out = np.zeros(batch.n_turns)
        out[last] = centred + self.config.bonus
        return out
'''


@pytest.fixture
def third_party_estimator(tmp_path, monkeypatch):
    """Install, for one test, a distribution that registers estimator ``last-turn-only``
    through the ``verifiers.advantage_estimators`` entry-point group, as a separate package
    would. Returns the estimator class."""
    (tmp_path / "stepwise_third_party.py").write_text(textwrap.dedent(_THIRD_PARTY))
    dist = tmp_path / "stepwise_third_party-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: stepwise-third-party\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[verifiers.advantage_estimators]\nlast-turn-only = stepwise_third_party:LastTurnOnly\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield importlib.import_module("stepwise_third_party").LastTurnOnly
    sys.modules.pop("stepwise_third_party", None)

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
import sys
import textwrap

import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: slower than ~5 s (the fast loop is -m 'not slow')")


_PACKAGE = "torchtitan.experiments.rl"

if _PACKAGE not in sys.modules and importlib.util.find_spec("vllm") is None:
    _spec = importlib.util.find_spec(_PACKAGE)
    sys.modules[_PACKAGE] = importlib.util.module_from_spec(_spec)  # __path__ set, __init__ not run

# prime-rl is git-only; without it the adapter runs on a stand-in for its two base classes
# (tests that need prime-rl itself check REAL_PRIME_RL).
REAL_PRIME_RL = importlib.util.find_spec("prime_rl") is not None
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

"""A feature whose extra is missing fails on import with a message naming the extra to install."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from verifiers_stepwise.extras import MissingExtra, install_command, requires

ROOT = Path(__file__).resolve().parents[1]
MISSING = "verifiers_stepwise_no_such_module"


def test_a_named_missing_module_raises_missing_extra_with_the_pip_command():
    with pytest.raises(MissingExtra) as caught, requires("the feature", MISSING, extra="plot"):
        import verifiers_stepwise_no_such_module  # noqa: F401
    assert str(caught.value) == (
        f"the feature needs {MISSING}, which is not installed: pip install 'verifiers-stepwise[plot]'"
    )
    assert caught.value.name == MISSING
    assert isinstance(caught.value, ImportError)  # `except ImportError` still catches it


def test_a_submodule_of_a_named_module_counts_and_a_hint_follows_the_extra():
    with pytest.raises(MissingExtra, match=r"needs .*: pip install 'verifiers-stepwise\[x\]' and run this$"):
        with requires("f", MISSING, extra="x", also="run this"):
            from verifiers_stepwise_no_such_module.sub import thing  # noqa: F401


def test_a_module_not_named_propagates_unchanged():
    """A module missing deeper inside an installed package is that package's problem: its own
    error, not a misleading 'install the extra'."""
    with pytest.raises(ModuleNotFoundError) as caught, requires("f", "matplotlib", extra="plot"):
        import verifiers_stepwise_no_such_module  # noqa: F401
    assert type(caught.value) is ModuleNotFoundError


def test_every_named_extra_exists_in_pyproject():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for extra in ("plot", "torchtitan", "tinker", "bench", "dev"):
        assert extra in extras
    assert install_command("plot") == "pip install 'verifiers-stepwise[plot]'"


# Each optional feature module: the package hidden from it, and the message its import gives.
TITAN = "pip install 'verifiers-stepwise[torchtitan]'"
FEATURES = {
    "verifiers_stepwise.analysis.plot": (
        "matplotlib",
        "vf-stepwise --plot (and the TRL command's reward curve) needs matplotlib, which is not installed: "
        "pip install 'verifiers-stepwise[plot]'",
    ),
    "verifiers_stepwise.hosts.torchtitan": (
        "torchtitan",
        f"verifiers_stepwise.hosts.torchtitan needs torchtitan, which is not installed: {TITAN}",
    ),
    "verifiers_stepwise.hosts.torchtitan.config_registry": (
        "torchtitan",
        # the recipes import the adapter first, which is what finds torchtitan missing
        f"verifiers_stepwise.hosts.torchtitan needs torchtitan, which is not installed: {TITAN}",
    ),
    "verifiers_stepwise.hosts.tinker": (
        "tinker_cookbook",
        "verifiers_stepwise.hosts.tinker needs tinker_cookbook, which is not installed: "
        "pip install 'verifiers-stepwise[tinker]' and pip install --no-deps tinker-cookbook==0.6.1",
    ),
    "verifiers_stepwise.hosts.prime_rl": (
        "prime_rl",
        "verifiers_stepwise.hosts.prime_rl needs prime_rl, which is not installed: "
        "install prime-rl from https://github.com/PrimeIntellect-ai/prime-rl (not on PyPI)",
    ),
}

_PROBE = """
import importlib, sys
module, hidden = sys.argv[1:]
sys.modules[hidden] = None  # `import hidden` now raises ModuleNotFoundError(name=hidden)
try:
    importlib.import_module(module)
except ImportError as error:
    print(type(error).__name__, error, sep=": ")
"""
# Importing these loads tinker (transformers) or verifiers before the hidden package: seconds.
SLOW = {"verifiers_stepwise.hosts.tinker", "verifiers_stepwise.hosts.prime_rl"}


@pytest.mark.parametrize("module", [pytest.param(m, marks=pytest.mark.slow) if m in SLOW else m for m in FEATURES])
def test_each_feature_module_names_its_extra_when_its_package_is_missing(module):
    """In a fresh process with the feature's package hidden, as if it were not installed."""
    hidden, message = FEATURES[module]
    result = subprocess.run([sys.executable, "-c", _PROBE, module, hidden], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"MissingExtra: {message}"

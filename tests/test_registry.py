"""Entry-point discovery, proved with real distribution metadata on sys.path in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from verifiers_stepwise import available_environments, available_estimators, get_estimator
from verifiers_stepwise.envs.bundles import ENVIRONMENT_GROUP
from verifiers_stepwise.estimators.grpo import GRPO
from verifiers_stepwise.estimators.registry import ESTIMATOR_GROUP, UnknownEstimator, estimator_class
from verifiers_stepwise.estimators.stepwise import Stepwise


def make_distribution(root: Path, name: str, entry_points: dict[str, dict[str, str]], module: str = "") -> None:
    """A minimal installed distribution: a *.dist-info folder with METADATA and entry_points.txt."""
    info = root / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    sections = [f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) for group, eps in entry_points.items()]
    (info / "entry_points.txt").write_text("\n".join(sections))
    if module:
        (root / f"{name.replace('-', '_')}.py").write_text(textwrap.dedent(module))


def run(code: str, path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={"PYTHONPATH": str(path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )


THIRD_PARTY = """
    from verifiers_stepwise import Estimator, EstimatorConfig

    class SignConfig(EstimatorConfig):
        threshold: float = 0.0

    class Sign(Estimator):
        '''+1 for turns above the threshold, -1 otherwise.'''
        Config = SignConfig

        def batched(self, batch):
            import numpy as np
            return np.where(batch.rewards > self.config.threshold, 1.0, -1.0)
"""


def test_builtin_estimators_are_registered():
    assert {"stepwise", "grpo"} <= set(available_estimators())
    assert estimator_class("stepwise") is Stepwise and estimator_class("grpo") is GRPO
    assert isinstance(get_estimator("stepwise", gamma=0.8), Stepwise)


def test_unknown_name_lists_installed():
    with pytest.raises(UnknownEstimator, match=r"no advantage estimator named 'kevin'; installed: .*grpo.*stepwise"):
        get_estimator("kevin")


def test_third_party_estimator_is_discovered_without_code_changes(tmp_path):
    make_distribution(tmp_path, "sign-estimator", {ESTIMATOR_GROUP: {"sign": "sign_estimator:Sign"}}, THIRD_PARTY)
    result = run(
        """
        import json
        from verifiers_stepwise import available_estimators, get_estimator
        estimator = get_estimator("sign", threshold=0.5)
        print(json.dumps([available_estimators(), estimator([[0.0, 1.0], [0.7]])]))
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    names, advantages = json.loads(result.stdout)
    assert "sign" in names and {"stepwise", "grpo"} <= set(names)
    assert advantages == [[-1.0, 1.0], [1.0]]


def test_third_party_config_is_validated(tmp_path):
    make_distribution(tmp_path, "sign-estimator", {ESTIMATOR_GROUP: {"sign": "sign_estimator:Sign"}}, THIRD_PARTY)
    result = run("from verifiers_stepwise import get_estimator; get_estimator('sign', threshold='high')", tmp_path)
    assert "ConfigError: Sign config: field 'threshold'" in result.stderr


def test_two_distributions_claiming_one_name_is_an_error_naming_both(tmp_path):
    make_distribution(tmp_path, "impostor", {ESTIMATOR_GROUP: {"stepwise": "impostor:Stepwise"}})
    result = run("from verifiers_stepwise import available_estimators; available_estimators()", tmp_path)
    assert result.returncode != 0
    assert "EntryPointConflict" in result.stderr
    assert "'stepwise' is registered twice" in result.stderr
    assert "'verifiers-stepwise'" in result.stderr and "'impostor'" in result.stderr


def test_entry_point_that_is_not_an_estimator(tmp_path):
    make_distribution(tmp_path, "wrong", {ESTIMATOR_GROUP: {"wrong": "json:JSONDecoder"}})
    result = run("from verifiers_stepwise import get_estimator; get_estimator('wrong')", tmp_path)
    assert "TypeError: estimator 'wrong' (json:JSONDecoder from wrong) is not a subclass" in result.stderr


def test_environment_bundles_are_listed(tmp_path):
    make_distribution(tmp_path, "my-env", {ENVIRONMENT_GROUP: {"my-env": "my_env"}})
    result = run(
        "import json; from verifiers_stepwise import available_environments as a; print(json.dumps(a()))", tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["my-env"] == "my_env"
    assert isinstance(available_environments(), dict)


def test_lookups_by_name_reuse_the_scan_until_a_distribution_is_installed(tmp_path):
    """score_group(group, "stepwise") resolves the name for every group: the entry points are
    read once, and read again when sys.path or one of its directories changes, so a package
    installed while the process runs is still found."""
    site = tmp_path / "site"
    site.mkdir()
    result = run(
        f"""
        import json, sys
        from verifiers_stepwise import plugins
        from verifiers_stepwise.estimators import registry
        scans = []
        scan = plugins._scan
        plugins._scan = lambda group: scans.append(group) or scan(group)
        for _ in range(50):
            registry.get_estimator("stepwise")
        before = len(scans)
        sys.path.append({str(site)!r})
        registry.available_estimators()
        sys.path.remove({str(site)!r})
        from tests.test_registry import make_distribution, THIRD_PARTY
        make_distribution(__import__("pathlib").Path({str(tmp_path)!r}), "sign-estimator",
                          {{registry.ESTIMATOR_GROUP: {{"sign": "sign_estimator:Sign"}}}}, THIRD_PARTY)
        print(json.dumps([before, "sign" in registry.available_estimators()]))
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [1, True]

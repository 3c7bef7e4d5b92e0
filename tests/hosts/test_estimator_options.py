"""One spelling of estimator options: a name and the estimator config's own field names, in
every entry point's syntax (docs/estimators.md, "Options in each entry point"), building the
same estimator and refused the same way. prime-rl's TOML is checked against prime-rl
559b447 itself in ``test_prime_rl_host.py`` (``test_register_and_the_documented_toml``)."""

from __future__ import annotations

import json

import chz
import pytest
import tyro
from tinker_cookbook.rl import train as tinker_train
from torchtitan.config.manager import ConfigManager, custom_registry

from tests.hosts.test_host_tinker import TRAIN_ARGV
from verifiers_stepwise import ConfigError, get_estimator
from verifiers_stepwise.analysis import cli as vf_stepwise
from verifiers_stepwise.hosts import estimator_from
from verifiers_stepwise.hosts import tinker as tinker_host
from verifiers_stepwise.hosts.torchtitan import StepwiseAdvantage
from verifiers_stepwise.hosts.trl.cli import blueprint

KEVIN = {"gamma": 0.4, "baseline": "pooled", "scale": "std"}
BAD = {"aggregation": "median"}


def python(options):
    return get_estimator("stepwise", **options)


def vf_stepwise_flags(options):
    argv = ["advantages", "traces.jsonl", *(f"--{k}={v}" for k, v in options.items())]
    return _vf_stepwise(argv)


def vf_stepwise_json(options):
    return _vf_stepwise(["advantages", "traces.jsonl", "--options", json.dumps(options)])


def _vf_stepwise(argv):
    args = vf_stepwise._parser(vf_stepwise._estimator_for_flags(argv)).parse_args(argv)
    return args.estimator_class(**vf_stepwise._options(args))


def trl(options):
    return blueprint(["--estimator", "stepwise", "--options", json.dumps(options), "--report_to", "none"]).estimator


def torchtitan(options):
    argv = ["--module", "tests.hosts.titan_sections", "--config", "verifiers_rollouter"]
    argv += [f"--advantage.options.{k}={v}" for k, v in options.items()]
    loaded, args = ConfigManager()._load_config(argv)
    config = tyro.cli(type(loaded), args=args, default=loaded, registry=custom_registry)
    return StepwiseAdvantage(config.advantage).estimator


def tinker(options):
    argv = ["estimator=stepwise", *(f"options.{k}={v}" for k, v in options.items())]
    config = chz.Blueprint(tinker_host.CLIConfig).make_from_argv(argv + [f"train.{a}" for a in TRAIN_ARGV])
    assert isinstance(config.train, tinker_train.Config)
    return estimator_from(config)


ENTRY_POINTS = [python, vf_stepwise_flags, vf_stepwise_json, trl, torchtitan, tinker]


@pytest.mark.parametrize("entry_point", ENTRY_POINTS, ids=lambda f: f.__name__)
def test_every_entry_point_builds_the_same_estimator_from_the_same_options(entry_point):
    built = entry_point(KEVIN)
    assert type(built) is type(python(KEVIN)) and built.config == python(KEVIN).config
    assert built.config != python({}).config  # the options were applied, not dropped


@pytest.mark.parametrize("entry_point", ENTRY_POINTS, ids=lambda f: f.__name__)
def test_every_entry_point_refuses_a_bad_option_naming_the_field(entry_point, capsys):
    with pytest.raises((ConfigError, ValueError, SystemExit)) as refused:  # argparse exits, printing why
        entry_point(BAD)
    said = str(refused.value) if not isinstance(refused.value, SystemExit) else capsys.readouterr().err
    assert "aggregation" in said and "median" in said


def test_vf_stepwise_refuses_a_field_given_both_as_a_flag_and_in_options():
    with pytest.raises(ConfigError, match="--options sets gamma, which a flag also sets"):
        _vf_stepwise(["advantages", "traces.jsonl", "--gamma", "0.5", "--options", '{"gamma": 0.4}'])
    with pytest.raises(ConfigError, match="--options: must be a JSON object"):
        _vf_stepwise(["advantages", "traces.jsonl", "--options", "[0.4]"])

"""``vf-stepwise``: see what stepwise credit does to your rollouts (docs/vf-stepwise.md).

The config flags are generated from the chosen estimator's pydantic ``Config`` (``flags``).
Heavy modules (numpy, verifiers, rich, matplotlib) are imported only by the command that
needs them, so ``vf-stepwise --help`` stays quick. A user error (``ConfigError``,
``RewardError``) prints as ``error: ...`` with exit status 2.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from verifiers_stepwise.errors import ConfigError, RewardError

if TYPE_CHECKING:
    from verifiers_stepwise.estimators import Estimator

__all__ = ["main"]

EXIT_BAD_INPUT = 2
EXIT_NO_PLOT = 1
"""``--plot`` without matplotlib: the tables and rows are written, the requested plot is not."""


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser(_estimator_for_flags(argv)).parse_args(argv)
    try:
        return args.command(args)
    except (ConfigError, RewardError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT


# -- parsing ------------------------------------------------------------------------------


def _estimator_for_flags(argv: list[str]) -> str | None:
    """The estimator whose config flags ``advantages`` takes; None for other commands."""
    if not argv or argv[0] != "advantages":
        return None
    peek = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    peek.add_argument("--estimator", default="stepwise")
    return peek.parse_known_args(argv[1:])[0].estimator


def _parser(estimator: str | None) -> argparse.ArgumentParser:
    from verifiers_stepwise import __version__

    parser = argparse.ArgumentParser(
        prog="vf-stepwise",
        description="See what stepwise (turn-level) credit does to your rollouts.",
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(title="commands", required=True, metavar="COMMAND")

    listing = commands.add_parser(
        "list",
        help="installed estimators (with their config fields) and environment bundles",
        description="Installed advantage estimators, with their config fields and defaults, "
        "and environment bundles, from the entry-point groups verifiers.advantage_estimators "
        "and verifiers.environments.",
        allow_abbrev=False,
    )
    listing.add_argument("--json", action="store_true", help="print JSON instead of tables")
    listing.set_defaults(command=_list)

    adv = commands.add_parser(
        "advantages",
        help="per-turn returns and advantages of traces.jsonl files",
        description="Group the episodes of traces.jsonl files by task, compute per-turn "
        "returns and advantages with an estimator, and summarise them per turn index.",
        epilog="Groups: episode.group.id when set, else episode.task.key, else "
        "episode.task.hash (exact strings), within one run and env; a group's trajectories "
        "are its trainable, error-free traces, as score_group scores them. Bad input stops "
        "with FILE:LINE and exit status 2 unless --skip-bad.",
        allow_abbrev=False,
    )
    adv.add_argument(
        "traces",
        nargs="+",
        type=Path,
        metavar="TRACES",
        help="traces.jsonl files (or vf-eval run directories holding one)",
    )
    adv.add_argument(
        "--estimator",
        help="registered estimator name (see `vf-stepwise list`); default: the one for the kind of credit the "
        "traces' env declares, or stepwise (whose fields the config flags then set) when it declares none "
        "or a config flag, --gammas or --compare :... is given",
    )
    adv.add_argument(
        "--compare",
        metavar="SPEC",
        help="a second config shown side by side: NAME, NAME:field=value,... "
        "(from NAME's defaults) or :field=value,... (the main config, changed)",
    )
    adv.add_argument("--gammas", metavar="G,G,...", help="gamma sweep table of the main estimator, e.g. 0,0.4,0.8,1.0")
    adv.add_argument(
        "--plot",
        type=Path,
        metavar="FILE.png",
        help="write per-turn-index distributions of returns and advantages (needs matplotlib, the plot extra; "
        "without it the tables are printed and the exit status is 1)",
    )
    out = adv.add_mutually_exclusive_group()
    out.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="FILE.jsonl",
        help="per-turn results (default: next to the first TRACES file, <name>.advantages.jsonl)",
    )
    out.add_argument("--no-output", action="store_true", help="write no per-turn file")
    adv.add_argument("--json", action="store_true", help="print the summary as JSON instead of tables")
    adv.add_argument(
        "--missing",
        choices=("final_turn", "error"),
        default="final_turn",
        help="a trace without per-turn rewards: score its trace reward on its last turn (final_turn, "
        "as score_group does by default) or treat it as bad input (error)",
    )
    adv.add_argument(
        "--skip-bad",
        action="store_true",
        help="skip bad lines and traces (each is counted and reported) instead of stopping at the first",
    )
    adv.add_argument(
        "--reading",
        choices=["rewards", "scores"],
        default="rewards",
        help="read trace.info['turn_rewards'] as per-turn rewards (default) or as per-turn scores, "
        "None = unscored, credited by differences (prime-rl PR #3282's reading)",
    )
    adv.add_argument(
        "--options",
        metavar="JSON",
        help="the estimator's config as one JSON object, e.g. '{\"gamma\": 0.4}' (as the TRL host takes it); "
        "the same fields as the flags below",
    )
    adv.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar on stderr (default: when stderr is a terminal)",
    )
    adv.set_defaults(command=_advantages)
    if estimator is not None:
        from verifiers_stepwise.analysis.flags import add_config_flags

        try:
            cls = _estimator_class(estimator)
        except ConfigError as e:
            adv.error(str(e))
        group = adv.add_argument_group(
            f"{estimator} config ({cls.__module__}:{cls.__qualname__}); pick another with --estimator NAME"
        )
        add_config_flags(group, cls.Config)
        adv.set_defaults(estimator_class=cls)
    return parser


def _estimator_class(name: str) -> type[Estimator]:
    from verifiers_stepwise.estimators.registry import estimator_class

    try:
        return estimator_class(name)
    except TypeError as e:  # a registered name that is not an Estimator
        raise ConfigError(str(e)) from None


# -- vf-stepwise list ---------------------------------------------------------------------


def _list(args: argparse.Namespace) -> int:
    from verifiers_stepwise.envs.bundles import available_environments
    from verifiers_stepwise.estimators.registry import available_estimators

    estimators = [_estimator_entry(name) for name in available_estimators()]
    environments = available_environments()
    if args.json:
        print(json.dumps({"estimators": estimators, "environments": environments}, indent=2, default=repr))
    else:
        _print_list(estimators, environments)
    return 0


def _estimator_entry(name: str) -> dict[str, Any]:
    """An installed estimator's class and config fields, or why it failed to load."""
    from verifiers_stepwise.analysis.flags import field_description, type_name
    from verifiers_stepwise.estimators.registry import estimator_class

    try:
        cls = estimator_class(name)
    except Exception as e:  # noqa: BLE001 - a broken plugin must not hide the others
        return {"name": name, "error": f"{type(e).__name__}: {e}"}
    fields = [
        {
            "name": field,
            "type": type_name(info.annotation),
            "default": info.get_default(call_default_factory=True),
            "description": field_description(info),
        }
        for field, info in cls.Config.model_fields.items()
    ]
    return {"name": name, "class": f"{cls.__module__}:{cls.__qualname__}", "fields": fields}


def _print_list(estimators: list[dict[str, Any]], environments: dict[str, str]) -> None:
    from rich.table import Table

    console = _console()
    table = Table(title="advantage estimators (verifiers.advantage_estimators)", title_justify="left", show_lines=True)
    for column in ("name", "class", "field", "type", "default", "description"):
        table.add_column(column, overflow="fold")
    for entry in estimators:  # the name and class on the first of its rows
        if "error" in entry:
            table.add_row(entry["name"], f"[red]failed to load: {entry['error']}[/]")
            continue
        head = [entry["name"], entry["class"]]
        for f in entry["fields"]:
            table.add_row(*head, f["name"], f["type"], repr(f["default"]), f["description"])
            head = ["", ""]
        if not entry["fields"]:
            table.add_row(*head)
    console.print(table)
    if not environments:
        console.print("no environment bundles installed (entry-point group verifiers.environments)")
        return
    envs = Table(title="environment bundles (verifiers.environments)", title_justify="left")
    envs.add_column("vf-eval ID")
    envs.add_column("module")
    for env_id, module in environments.items():
        envs.add_row(env_id, module)
    console.print(envs)


# -- vf-stepwise advantages ---------------------------------------------------------------


def _advantages(args: argparse.Namespace) -> int:
    from verifiers_stepwise.analysis.report import render, summary, write_turn_rows
    from verifiers_stepwise.extras import MissingExtra

    paths = [_traces_file(p) for p in args.traces]
    main_estimator, compare, sweep_estimators = _estimators(args)  # every setting, before the long read
    plot, no_plot = args.plot, None
    if plot is not None:
        try:
            from verifiers_stepwise.analysis.plot import plot_credit
        except MissingExtra as e:  # the tables need none: they are printed, then this line, exit status 1
            plot, no_plot = None, f"no plot written: {e}"
    output = None if args.no_output else args.output or paths[0].with_name(paths[0].stem + ".advantages.jsonl")
    for path in filter(None, (output, plot)):
        _check_output(path, paths)
    collected = _collect(paths, args)
    if main_estimator is None:  # none named: the kind of credit the traces declare decides
        main_estimator = _kind_estimator(collected.kinds)
        args.estimator = main_estimator.name
    grouped = collected.grouped()
    configs = [_config(args.estimator, main_estimator, grouped.batch)]
    if compare is not None:
        configs.append(_config(*compare, grouped.batch))
    sweep = [_config(args.estimator, estimator, grouped.batch) for estimator in sweep_estimators]
    if output is not None:
        write_turn_rows(output, collected, grouped, configs)
    if plot is not None:
        plot_credit(plot, grouped.batch, configs)
    report = summary(collected, grouped, configs, sweep, output, plot)
    if args.json:
        print(json.dumps(asdict(report), indent=2, default=str))  # paths as str
    else:
        render(_console(), report)
    if no_plot is not None:
        print(f"error: {no_plot}", file=sys.stderr)
        return EXIT_NO_PLOT
    return 0


def _estimators(args: argparse.Namespace) -> tuple[Estimator | None, tuple[str, Estimator] | None, list[Estimator]]:
    """The main config, ``--compare``'s (named) and the ``--gammas`` sweep's, each checked. The
    main config is None when nothing names or configures it: the traces' kind of credit decides."""
    from verifiers_stepwise.analysis.stats import with_gamma

    if args.estimator is None and not (_options(args) or args.gammas or (args.compare or "").startswith(":")):
        return None, _compare(args.compare, "", None) if args.compare else None, []
    args.estimator = args.estimator or "stepwise"
    main_estimator = args.estimator_class(**_options(args))
    compare = _compare(args.compare, args.estimator, main_estimator) if args.compare else None
    try:
        return main_estimator, compare, [with_gamma(main_estimator, g) for g in _gammas(args.gammas or "")]
    except ValueError as e:  # ConfigError included
        raise ConfigError(f"--gammas: {e}") from None


def _collect(paths: list[Path], args: argparse.Namespace) -> Any:
    """The traces' turns, with a progress bar when asked; bad input, or nothing to score, is one ConfigError."""
    from verifiers_stepwise.analysis.tracefile import BadInput, collect

    read = functools.partial(collect, paths, skip_bad=args.skip_bad, missing=args.missing, reading=args.reading)
    show = sys.stderr.isatty() if args.progress is None else args.progress
    try:
        collected = _with_progress(read, paths, args.progress) if show else read()
    except BadInput as e:
        raise ConfigError(f"{e}\n(--skip-bad skips bad lines and traces and counts them)") from None
    if not collected.lengths:
        raise ConfigError(f"no scorable trajectories in {', '.join(map(str, paths))}{_why_none(collected)}")
    return collected


def _kind_estimator(kinds: Any) -> Estimator:
    """The estimator for the kind of credit the traces declare (``traces.kinds``), said on stderr."""
    from verifiers_stepwise.traces.kinds import CreditKind, estimator_for

    declared = sorted(str(kind) for kind in kinds if kind is not None)
    if len(declared) > 1:
        raise ConfigError(f"the traces declare several kinds of credit ({', '.join(declared)}): name one --estimator")
    if declared and declared[0] not in set(CreditKind):
        raise ConfigError(f"the traces declare credit_kind {declared[0]!r}, not one of {', '.join(CreditKind)}")
    return estimator_for(CreditKind(declared[0]) if declared else None)


def _config(name: str, estimator: Estimator, batch: Any) -> Any:
    """One config on the batch: the estimator's own estimate, checked as every credit record's is."""
    from verifiers_stepwise.analysis.report import Config
    from verifiers_stepwise.analysis.stats import describe
    from verifiers_stepwise.traces.credit import checked_estimate

    label = describe(name, estimator)
    return Config(label, estimator, checked_estimate(estimator, batch, label))  # RewardError: e.g. an overflow


def _check_output(output: Path, inputs: list[Path]) -> None:
    """Before anything is read: ``output`` can be written where it is, and is none of the
    inputs under another name (the same path, a symlink or a hard link to one)."""
    parent = output.resolve().parent
    if not parent.is_dir():
        raise ConfigError(f"{output}: cannot write there, {parent} is not a directory")
    if not output.exists():
        return
    target = output.stat()
    for path in inputs:
        if path.exists() and (path.stat().st_dev, path.stat().st_ino) == (target.st_dev, target.st_ino):
            raise ConfigError(f"{output}: would overwrite the input file {path} (the same file under another name)")


def _why_none(collected: Any) -> str:
    """Why no trajectory could be scored, from the reading's accounting."""
    counts, skipped = collected.counts, sum(collected.skipped.values())
    if not counts.traces and not skipped:
        return ": the files hold no traces"
    reasons = {
        "errored (trace.ok or episode.ok false)": counts.errored,
        "not trainable": counts.not_trainable,
        "bad lines or traces skipped": skipped,
    }
    given = ", ".join(f"{n} {reason}" for reason, n in reasons.items() if n)
    return f": of {counts.traces} traces, {given}" if given else ""


def _traces_file(path: Path) -> Path:
    if path.is_dir():
        path = path / "traces.jsonl"
    if not path.is_file():
        raise ConfigError(f"{path}: no such traces file")
    return path


def _options(args: argparse.Namespace) -> dict[str, Any]:
    """The main estimator's fields: its flags (``--gamma 0.4``) and ``--options`` JSON, not both."""
    from verifiers_stepwise.analysis.flags import config_values, options_json

    flags = config_values(args)
    given = options_json(args.options) if args.options is not None else {}
    twice = sorted(set(flags) & set(given))
    if twice:
        raise ConfigError(f"--options sets {', '.join(twice)}, which a flag also sets; give each field once")
    return {**given, **flags}


def _compare(spec: str, main_name: str, main_estimator: Any) -> tuple[str, Any]:
    """``NAME``, ``NAME:field=value,...`` or ``:field=value,...`` -> (name, estimator)."""
    name, _, assignments = spec.partition(":")
    fields: dict[str, Any] = {}
    if not name:
        name = main_name
        fields.update(main_estimator.config.model_dump())
    for assignment in filter(None, (a.strip() for a in assignments.split(","))):
        field, equals, value = assignment.partition("=")
        if not equals or not field.strip():
            raise ConfigError(f"--compare {spec!r}: expected field=value, got {assignment!r}")
        fields[field.strip().replace("-", "_")] = value.strip()
    cls = type(main_estimator) if name == main_name else _estimator_class(name)
    return name, cls(**fields)


def _gammas(text: str) -> list[float]:
    try:
        return [float(g) for g in text.split(",") if g.strip()]
    except ValueError:
        raise ValueError(f"expected numbers separated by commas, got {text!r}") from None


def _with_progress(read: Callable[..., Any], paths: list[Path], force: bool | None) -> Any:
    """``read(progress=...)`` under a progress bar of the bytes read, on stderr."""
    from rich import progress as bar

    with bar.Progress(
        bar.TextColumn("{task.description}"),
        bar.BarColumn(),
        bar.DownloadColumn(),
        bar.TransferSpeedColumn(),
        bar.TimeRemainingColumn(),
        # --progress asks for the bar even when stderr is not a terminal (a log file, CI).
        console=_console(stderr=True, force_terminal=force),
        transient=True,
    ) as progress:
        task = progress.add_task("loading verifiers", total=sum(p.stat().st_size for p in paths))
        import verifiers.v1  # noqa: F401 - seconds of imports, shown as such rather than as 0 MB/s

        progress.update(task, description="reading traces")
        return read(progress=lambda n: progress.advance(task, n))


def _console(stderr: bool = False, force_terminal: bool | None = None) -> Any:
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    # Piped output has no terminal width; rich would fall back to 80 and wrap the tables.
    width = None if stream.isatty() or "COLUMNS" in os.environ else 160
    return Console(stderr=stderr, width=width, force_terminal=force_terminal)


if __name__ == "__main__":
    sys.exit(main())

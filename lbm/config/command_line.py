"""Hydra command lines: Hydra's flags apart from overrides, the jobs of a sweep, the output location, the hand-over.

Used by every command that takes Hydra overrides (run, bench, inspect, validate, the studies).
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lbm.config.checks import CONFIG_DIR, did_you_mean
from lbm.errors import LbmError

HYDRA_FLAGS_WITH_VALUE = ("--cfg", "-c", "--package", "-p", "--config-name", "-cn", "--config-dir", "-cd",
                          "--info", "-i", "--config-path", "-cp", "--experimental-rerun")
HELP_FLAGS = ("-h", "--help", "--hydra-help", "--version", "--shell-completion", "-sc")
"""Flags after which Hydra prints something and runs no job."""
KNOWN_FLAGS = ("-m", "--multirun", "--resolve", *HELP_FLAGS, *HYDRA_FLAGS_WITH_VALUE)
MAX_PREVALIDATED_JOBS = 4096


def split_hydra_args(args: Sequence[str]) -> tuple[list[str], bool, bool]:
    """Separate overrides from Hydra's own flags; returns (overrides, multirun, has_info_flags)."""
    overrides: list[str] = []
    multirun = info = False
    it = iter(args)
    for a in it:
        if a in ("-m", "--multirun"):
            multirun = True
        elif a in (*HELP_FLAGS, "--resolve"):
            info = True
        elif a in HYDRA_FLAGS_WITH_VALUE:
            info = info or a in ("--cfg", "-c", "--info", "-i")
            next(it, None)
        elif a.startswith("-"):
            raise LbmError(f"unknown option {a!r}{did_you_mean(a, KNOWN_FLAGS)}: pass config overrides as key=value "
                           "(see python -m lbm run --help)")
        else:
            overrides.append(a)
    return overrides, multirun, info


def expand_jobs(overrides: list[str], multirun: bool) -> list[list[str]]:
    """The override lists of every job a (multi)run will execute."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException as exc:
        raise LbmError(f"cannot parse overrides: {str(exc).splitlines()[0]}") from None
    choices: list[list[str]] = []
    for o in parsed:
        key = o.get_key_element()
        if o.is_sweep_override():
            if not multirun:
                raise LbmError(f"{o.input_line} is a sweep: add -m (multirun) to run one job per value")
            choices.append([f"{key}={v}" for v in o.sweep_string_iterator()])
        else:
            choices.append([o.input_line])
    jobs = [list(c) for c in itertools.islice(itertools.product(*choices), MAX_PREVALIDATED_JOBS)]
    return jobs or [[]]


def output_root(overrides: list[str], multirun: bool) -> Path:
    """The directory a run will create its run directories under."""
    given = hydra_value(overrides, "hydra.sweep.dir" if multirun else "hydra.run.dir")
    return Path(given).expanduser() if given is not None else Path("outputs")


def hydra_value(overrides: Sequence[str], key: str) -> str | None:
    """The value the overrides give a Hydra setting (``hydra.run.dir``, ``hydra/launcher``), else None."""
    value = None
    for o in overrides:
        name, sep, text = o.partition("=")
        if sep and name.lstrip("+~") == key:
            value = text
    return value


def fresh_run_dir(root: Path, stamp: str | None = None) -> Path:
    """A new directory ``<root>/<date>/<time>`` as Hydra names it (``-1``, ``-2``... if taken), created here so that
    no other run can take it."""
    import datetime

    base = root.expanduser() / (stamp or datetime.datetime.now().strftime("%Y-%m-%d/%H-%M-%S"))
    base.parent.mkdir(parents=True, exist_ok=True)
    path, k = base, 0
    while True:
        try:
            path.mkdir()
            return path
        except FileExistsError:
            k += 1
            path = base.with_name(f"{base.name}-{k}")


LAUNCHER_NEEDS = {"slurm": ("sbatch", "hydra_plugins.hydra_submitit_launcher", "hydra-submitit-launcher")}
"""The command and the Hydra plugin each shipped launcher (configs/hydra/launcher/) submits with."""


def check_launcher(name: str | None) -> None:
    """Refuse a shipped launcher whose plugin or scheduler is missing here (before Hydra tries to submit)."""
    import importlib.util
    import shutil

    if name not in LAUNCHER_NEEDS:
        return
    command, module, package = LAUNCHER_NEEDS[name]
    if importlib.util.find_spec(module.split(".")[0]) is None or importlib.util.find_spec(module) is None:
        raise LbmError(f"hydra/launcher={name} needs the Hydra plugin {package}: pip install {package} "
                       "(or drop hydra/launcher to run the jobs here)")
    if shutil.which(command) is None:
        raise LbmError(f"hydra/launcher={name} submits with {command}, which is not on PATH here: run the sweep on a "
                       f"machine of the cluster (its login node), or drop hydra/launcher={name} to run the jobs here")


def check_writable(path: Path) -> None:
    """Refuse an output location where no directory can be created."""
    import tempfile

    probe = path.absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        if not probe.is_dir():
            raise NotADirectoryError(str(probe))
        tempfile.TemporaryDirectory(dir=probe).cleanup()
    except OSError as exc:
        raise LbmError(f"output directory {path} is not writable ({exc.strerror or exc}): "
                       "set hydra.run.dir (or hydra.sweep.dir) to a writable place") from None


def run_hydra(task: Any, config_name: str, command: str, args: Sequence[str]) -> int:
    """Hand ``args`` to a Hydra main around ``task`` with the config ``config_name`` (single run or multirun).

    ``task`` None: only for Hydra's own output (``--help``, ``--cfg``), where it runs no job.
    """
    import hydra

    from lbm.config.schema import register

    register()
    main = hydra.main(config_path=str(CONFIG_DIR), config_name=config_name, version_base="1.3")(task or _no_job)
    argv = sys.argv
    sys.argv = [f"lbm {command}", *args]
    try:
        main()
    finally:
        sys.argv = argv
    return 0


class ArgumentParser(argparse.ArgumentParser):
    """argparse for a command's own options: a bad option is one LbmError line (exit 2), not argparse's usage text."""

    def error(self, message: str) -> Any:
        """Raise LbmError naming the command and where its options are listed."""
        raise LbmError(f"{self.prog.removeprefix('python -m lbm ')}: {message} ({self.prog} --help)")


def _no_job(cfg: Any) -> None:
    """The task of a Hydra call that must not run a job."""
    raise LbmError("internal: a help or --cfg call of Hydra started a job")


def take_option(args: Sequence[str], name: str) -> tuple[str | None, list[str]]:
    """The value of ``name VALUE`` (or ``name=VALUE``) among ``args``, and the other arguments; LbmError without a value."""
    value: str | None = None
    rest: list[str] = []
    it = iter(args)
    for a in it:
        if a == name:
            value = next(it, None)
            if value is None:
                raise LbmError(f"{name} needs a value")
        elif a.startswith(name + "="):
            value = a.split("=", 1)[1]
        else:
            rest.append(a)
    return value, rest

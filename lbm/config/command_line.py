"""Hydra command lines: Hydra's flags apart from overrides, the jobs of a sweep, the output location, the hand-over.

Used by every command that takes Hydra overrides (run, bench, inspect, validate, the studies).
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lbm.config.loader import CONFIG_DIR
from lbm.errors import LbmError

HYDRA_FLAGS_WITH_VALUE = ("--cfg", "-c", "--package", "-p", "--config-name", "-cn", "--config-dir", "-cd",
                          "--info", "-i", "--config-path", "-cp", "--experimental-rerun")
MAX_PREVALIDATED_JOBS = 4096


def split_hydra_args(args: Sequence[str]) -> tuple[list[str], bool, bool]:
    """Separate overrides from Hydra's own flags; returns (overrides, multirun, has_info_flags)."""
    overrides: list[str] = []
    multirun = info = False
    it = iter(args)
    for a in it:
        if a in ("-m", "--multirun"):
            multirun = True
        elif a in ("-h", "--help", "--hydra-help", "--version", "--shell-completion", "-sc", "--resolve"):
            info = True
        elif a in HYDRA_FLAGS_WITH_VALUE:
            info = info or a in ("--cfg", "-c", "--info", "-i")
            next(it, None)
        elif a.startswith("-"):
            raise LbmError(f"unknown option {a!r}: pass config overrides as key=value (see python -m lbm run --help)")
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
    key = "hydra.sweep.dir=" if multirun else "hydra.run.dir="
    for o in overrides:
        if o.startswith(key):
            return Path(o.split("=", 1)[1]).expanduser()
    return Path("outputs")


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
    """Hand ``args`` to a Hydra main around ``task`` with the config ``config_name`` (single run or multirun)."""
    import hydra

    from lbm.config.schema import register

    register()
    main = hydra.main(config_path=str(CONFIG_DIR), config_name=config_name, version_base="1.3")(task)
    argv = sys.argv
    sys.argv = [f"lbm {command}", *args]
    try:
        main()
    finally:
        sys.argv = argv
    return 0


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

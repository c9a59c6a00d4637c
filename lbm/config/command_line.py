"""Hydra command lines: Hydra's flags apart from overrides, the jobs of a sweep, the output location, the hand-over.

Used by every command that takes Hydra overrides (run, bench, inspect, validate, the studies).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import os
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


HYDRA_FLAG_CHOICES = {"--cfg": ("job", "hydra", "all"),
                      "--info": ("all", "config", "defaults", "defaults-tree", "plugins", "searchpath")}
"""Hydra's flags whose value is one of a few words (--info's is optional)."""
HYDRA_FLAG_ALIASES = {"-c": "--cfg", "-i": "--info"}


def split_hydra_args(args: Sequence[str], command: str = "run", flags: Sequence[str] = ()
                     ) -> tuple[list[str], bool, bool]:
    """Separate overrides from Hydra's own flags; returns (overrides, multirun, has_info_flags).

    ``command``: the lbm command (for the messages); ``flags``: its own options, offered for a mistyped one. A bad
    flag or flag value is one LbmError line here, not Hydra's usage text later."""
    overrides: list[str] = []
    multirun = info = False
    args = list(args)
    for i, a in enumerate(args):
        if i and args[i - 1] in HYDRA_FLAGS_WITH_VALUE and not (args[i - 1] in ("--info", "-i") and a.startswith("-")):
            continue  # the value of the flag before
        if a in ("-m", "--multirun"):
            multirun = True
        elif a in (*HELP_FLAGS, "--resolve"):
            info = True
        elif a in HYDRA_FLAGS_WITH_VALUE:
            info = info or a in ("--cfg", "-c", "--info", "-i")
            check_flag_value(a, args[i + 1] if i + 1 < len(args) else None, command)
        elif a.startswith("-"):
            raise LbmError(f"{command}: unknown option {a!r}{did_you_mean(a, (*flags, *KNOWN_FLAGS))}: pass config "
                           f"overrides as key=value (python -m lbm {command} --help)")
        else:
            overrides.append(a)
    return overrides, multirun, info


def check_flag_value(flag: str, value: str | None, command: str) -> None:
    """Refuse a missing value of one of Hydra's flags, or one it does not know (--cfg job|hydra|all, --info ...)."""
    name = HYDRA_FLAG_ALIASES.get(flag, flag)
    choices = HYDRA_FLAG_CHOICES.get(name)
    if name == "--info" and (value is None or value.startswith("-")):
        return  # --info alone: all
    if value is None:
        raise LbmError(f"{command}: {flag} needs a value" + (f": one of {', '.join(choices)}" if choices else ""))
    if choices and value not in choices:
        raise LbmError(f"{command}: {flag} {value}: expected one of {', '.join(choices)}{did_you_mean(value, choices)}")


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


def hydra_value(overrides: Sequence[str], key: str) -> str | None:
    """The value the overrides give a Hydra setting (``hydra.run.dir``, ``hydra/launcher``), else None."""
    value = None
    for o in overrides:
        name, sep, text = o.partition("=")
        if sep and name.lstrip("+~") == key:
            value = text
    return value


def fresh_run_dir(root: Path, stamp: str | None = None, reserve: bool = True) -> Path:
    """A new directory ``<root>/<date>/<time>`` as Hydra names it (``-1``, ``-2``... if taken), created here so that
    no other run can take it (``reserve`` False: only named, the first such name not taken now)."""
    import datetime

    base = root.expanduser() / (stamp or datetime.datetime.now().strftime("%Y-%m-%d/%H-%M-%S"))
    if reserve:
        base.parent.mkdir(parents=True, exist_ok=True)
    path, k = base, 0
    while True:
        try:
            if reserve:
                path.mkdir()
            elif os.path.lexists(path):
                raise FileExistsError(path)
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


def check_writable(path: Path, setting: str = "hydra.run.dir (or hydra.sweep.dir)") -> None:
    """Refuse an output location where no directory can be created (``setting``: the key that chooses it)."""
    import tempfile

    probe = path.absolute()
    while not probe.exists() and probe != probe.parent:
        if probe.is_symlink():
            raise LbmError(f"output directory {path} cannot be created: {probe} is a symbolic link to "
                           f"{os.readlink(probe)}, which does not exist; set {setting} to a writable place")
        probe = probe.parent
    if not probe.is_dir():
        raise LbmError(f"output directory {path} cannot be created: {probe} is a file, not a directory; "
                       f"set {setting} to a writable place")
    try:
        tempfile.TemporaryDirectory(dir=probe).cleanup()
    except OSError as exc:
        raise LbmError(f"output directory {path} is not writable ({exc.strerror or exc}): "
                       f"set {setting} to a writable place") from None


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
        """Raise LbmError naming the command, the option meant (for a mistyped one) and where its options are listed."""
        words = message.removeprefix("unrecognized arguments: ").split() if message.startswith("unrecognized") else []
        hint = next((did_you_mean(w, self.option_names()) for w in words if w.startswith("-")), "")
        raise LbmError(f"{self.prog.removeprefix('python -m lbm ')}: {message}{hint} ({self.prog} --help)")

    def option_names(self) -> list[str]:
        """Every option string of this parser (--quick, --out, ...)."""
        return [name for name in self._option_string_actions if name.startswith("--")]


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


RESULT_FILES = ("metrics.json", "fields.npz")
"""The files a finished run leaves in its directory."""
SWEEP_RECORD = "multirun.yaml"
"""The record Hydra writes into a sweep's directory."""
PINNED_SUBDIR = "lbm_job_subdir"
"""The resolver that hands each job of a sweep the subdirectory checked before Hydra started."""


@dataclasses.dataclass(frozen=True)
class Destination:
    """Where a run or sweep will write, resolved by Hydra's own composition before Hydra starts."""

    job_dirs: list[Path]
    """Each job's directory (absolute, as Hydra's hydra.runtime.output_dir will be), in job order."""
    sweep_dir: Path | None
    """A sweep's directory (its multirun.yaml), None for a single run."""
    record: tuple[str, ...]
    """The names Hydra writes into a job's directory (hydra.output_subdir, the log file)."""
    subdirs: list[str] | None = None
    """A sweep's job subdirectories, to pin when they read the clock (${now:...}), else None."""
    default: bool = False
    """The directory is Hydra's default outputs/<date>/<time>: reserved (created empty) when pinned, so that two
    runs started in the same second get two directories."""


def hydra_of(task: Any) -> Any:
    """A Hydra instance set up as ``hydra.main`` sets it up for ``task`` (task name, config search path)."""
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import (
        create_automatic_config_search_path,
        detect_calling_file_or_module_from_task_function,
        detect_task_name,
    )
    from hydra.core.global_hydra import GlobalHydra

    from lbm.config.schema import register

    register()
    calling_file, calling_module = detect_calling_file_or_module_from_task_function(task)
    search_path = create_automatic_config_search_path(calling_file, calling_module, str(CONFIG_DIR))
    GlobalHydra.instance().clear()
    return Hydra.create_main_hydra2(task_name=detect_task_name(calling_file, calling_module),
                                    config_search_path=search_path)


def destination(overrides: list[str], multirun: bool, task: Any, config_name: str = "config") -> Destination:
    """The directories a ``python -m lbm run`` with ``overrides`` will write, computed as Hydra computes them
    (hydra.core.utils.run_job: hydra.run.dir, or hydra.sweep.dir joined with each job's hydra.sweep.subdir,
    with every interpolation and resolver: ${now:...}, ${oc.env:...}, ${hydra:job.num}...)."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    key = "hydra.sweep" if multirun else "hydra.run"
    default = hydra_value(overrides, f"{key}.dir") is None
    hydra = hydra_of(task)
    try:
        return (_sweep_destination if multirun else _run_destination)(hydra, overrides, config_name, default)
    except (HydraException, OmegaConfBaseException) as exc:
        what = f"{key}.dir" + (" / hydra.sweep.subdir" if multirun else "")
        raise LbmError(f"cannot resolve the run directory ({what}): {str(exc).splitlines()[0]}") from None
    finally:
        HydraConfig.instance().cfg = None  # type: ignore[assignment]
        GlobalHydra.instance().clear()


RUN_RECORD = (".hydra", "lbm.log")
"""What Hydra writes into a run's directory with lbm's settings (hydra.output_subdir, <hydra.job.name>.log)."""


def _record(cfg: Any) -> tuple[str, ...]:
    """The names a job writes into its directory before its task starts (hydra.output_subdir and <job name>.log, as
    this run sets them), and those of an earlier run with lbm's settings."""
    subdir = cfg.hydra.output_subdir
    names = (*RUN_RECORD, *((str(subdir),) if subdir is not None else ()), f"{cfg.hydra.job.name}.log")
    return tuple(dict.fromkeys(names))


def _run_destination(hydra: Any, overrides: list[str], config_name: str, default: bool) -> Destination:
    """A single run's directory (Hydra.run: run_job with hydra.run.dir)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    cfg = hydra.compose_config(config_name, [*overrides, "hydra.mode=RUN"], run_mode=RunMode.RUN)
    HydraConfig.instance().set_config(cfg)
    path = fresh_run_dir(Path("outputs"), reserve=False) if default else \
        Path(os.path.abspath(str(OmegaConf.select(cfg, "hydra.run.dir"))))
    return Destination([path], None, _record(cfg), default=default)


def _sweep_destination(hydra: Any, overrides: list[str], config_name: str, default: bool) -> Destination:
    """A sweep's directory and each job's (BasicSweeper and BasicLauncher: run_job with hydra.sweep.dir joined with
    hydra.sweep.subdir, in a config composed per job with hydra.job.num set)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.types import RunMode
    from omegaconf import OmegaConf, open_dict

    master = hydra.compose_config(config_name, [*overrides, "hydra.mode=MULTIRUN"], run_mode=RunMode.MULTIRUN)
    HydraConfig.instance().set_config(master)
    sweep = fresh_run_dir(Path("outputs") / "multirun", reserve=False) if default else \
        Path(os.path.abspath(str(master.hydra.sweep.dir)))
    raw_subdir = OmegaConf.to_container(master.hydra.sweep, resolve=False)["subdir"]
    params = [f"{k}={v}" for k, v in (OmegaConf.select(master, "hydra.sweeper.params") or {}).items()]
    task = [*params, *OmegaConf.to_container(master.hydra.overrides.task, resolve=False)]
    parser = OverridesParser.create(config_loader=hydra.config_loader)
    jobs = [job for batch in BasicSweeper.split_arguments(parser.parse_overrides(task), None) for job in batch]
    subdirs = []
    for num, job in enumerate(jobs):
        if raw_subdir == "${hydra.job.num}" or (isinstance(raw_subdir, str) and "${" not in raw_subdir):
            subdirs.append(str(num) if "${" in raw_subdir else raw_subdir)  # no interpolation: no composition needed
            continue
        cfg = hydra.config_loader.load_sweep_config(master, list(job))
        with open_dict(cfg):
            cfg.hydra.job.id = num
            cfg.hydra.job.num = num
        HydraConfig.instance().set_config(cfg)
        subdirs.append(str(OmegaConf.select(cfg, "hydra.sweep.subdir")))
    dirs = [Path(os.path.abspath(os.path.join(sweep, s))) for s in subdirs]
    clock = isinstance(raw_subdir, str) and "${now:" in raw_subdir  # read when each job starts: pinned per job
    return Destination(dirs, sweep, _record(master), subdirs if clock else None, default)


def pin(dest: Destination, local: bool = True) -> list[str]:
    """The Hydra overrides (appended after the user's) that make Hydra write exactly where ``dest`` was checked:
    the directory as a literal path (Hydra's default one reserved now) and, where the jobs run in this process
    (``local``: Hydra's basic launcher), a sweep's clock-read subdirectories through a resolver that hands each job
    the one checked for it."""
    from omegaconf import OmegaConf

    if dest.sweep_dir is None:
        path = fresh_run_dir(Path("outputs")).absolute() if dest.default else dest.job_dirs[0]
        return [f"hydra.run.dir={pinned(path)}"]
    sweep = fresh_run_dir(Path("outputs") / "multirun").absolute() if dest.default else dest.sweep_dir
    pins = [f"hydra.sweep.dir={pinned(sweep)}"]
    if dest.subdirs is not None and local:
        table = list(dest.subdirs)
        OmegaConf.register_new_resolver(PINNED_SUBDIR, lambda num: table[int(num)], replace=True)
        pins.append(f"hydra.sweep.subdir='${{{PINNED_SUBDIR}:${{hydra.job.num}}}}'")
    return pins


def pinned(path: Path) -> str:
    """``path`` as the value of a Hydra override that Hydra reads back as exactly this path."""
    from hydra._internal.grammar.utils import escape_special_characters

    text = str(path)
    if "${" in text or "'" in text or '"' in text:
        raise LbmError(f"run directory {text!r}: a directory name with quotes or '${{' cannot be given to Hydra; "
                       "choose another hydra.run.dir (hydra.sweep.dir)")
    return escape_special_characters(text)


def check_destination(dest: Destination, setting: str) -> None:
    """Refuse a destination where an earlier run's record or results would be touched: a job directory (or the
    sweep's) that holds a run's files or lies inside an earlier run's directory, two jobs sharing one directory, or
    a place where no directory can be created."""
    seen: dict[Path, int] = {}
    for num, path in enumerate(dest.job_dirs):
        if path in seen:
            raise LbmError(f"jobs {seen[path]} and {num} of the sweep would both write {path}: set hydra.sweep.subdir "
                           "to a value that differs per job (the default is ${hydra.job.num})")
        seen[path] = num
    for path in dest.job_dirs + ([dest.sweep_dir] if dest.sweep_dir is not None else []):
        check_fresh(path, setting, dest.record)


def check_fresh(path: Path, setting: str, record: Sequence[str] = RUN_RECORD) -> None:
    """Refuse to write into ``path`` (``setting``: the key that chooses it) when it, or a directory it lies in,
    holds an earlier run's results or record (``record``: the names Hydra writes), or cannot be created."""
    marks = (*RESULT_FILES, *record, SWEEP_RECORD)
    here = Path.cwd().absolute()
    for place in (path, *path.parents):
        if place != path and (place == here or place in here.parents):
            break  # the directory you work in (and those above it) may hold a run of its own
        found = [name for name in marks if os.path.lexists(place / name)]
        if not found:
            continue
        what = "already holds results" if set(found) & set(RESULT_FILES) else "already holds a run's record"
        where = f"run directory {path}" if place == path else f"{path} lies inside run directory {place}, which"
        raise LbmError(f"{where} {what} ({', '.join(found)}); refusing to overwrite: choose another {setting}")
    check_writable(path, setting)

"""Command line: ``python -m lbm run [hydra overrides]``.

Every configuration (each job of a sweep too) is composed and validated (:func:`lbm.config.load`)
before Hydra starts, so bad input gives one line and exit code 2 and writes nothing. The Hydra
task then finds its job's validated config in the process (:func:`lbm.config.from_composed`).
"""

from __future__ import annotations

import itertools
import logging
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lbm.config import CONFIG_DIR, compose

__all__ = ["compose", "main", "prevalidate", "run_hydra", "split_hydra_args", "expand_jobs"]
from lbm.errors import LbmError

HYDRA_FLAGS_WITH_VALUE = ("--cfg", "-c", "--package", "-p", "--config-name", "-cn", "--config-dir", "-cd",
                          "--info", "-i", "--config-path", "-cp", "--experimental-rerun")
MAX_PREVALIDATED_JOBS = 4096

USAGE = """usage: python -m lbm COMMAND [options]

commands:
  run [hydra overrides]   simulate; default: the cylinder case (python -m lbm run --help for the config)
                          e.g. python -m lbm run case=cavity grid.nx=130 grid.ny=130 steps=20000
                          sweep: python -m lbm run -m grid.nx=128,256
                          profile: python -m lbm run profile.enabled=true
  bench [hydra overrides] throughput and roofline; writes bench.json
  analyze PATH            per-stage breakdown of a trace, run directory or multirun directory
  compare BASE NEW        regression verdict between two bench.json files
  inspect target=NAME [overrides]
                          compile for a target without the device (cpu, h100, h200, a100, v5e, v6e): kernels
                          of the loop body, bytes per cell and step, projected MLUPS; writes inspect.json
  validate [overrides]    physics against analytic solutions and Ghia et al.; writes a report
  study batching|compile|export  loop vs lax.map vs vmap ensembles; compile vs run; jax.export bundle
"""


def fail(message: str, code: int = 2) -> int:
    """Print one error line to stderr and return the exit code."""
    one_line = " ".join(message.split("\n"))
    print(f"lbm: error: {one_line}", file=sys.stderr)
    return code


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


def prevalidate(overrides: list[str], multirun: bool, output: bool = True) -> None:
    """Validate every job's config (and, with ``output``, the output location); raise LbmError on the first problem."""
    from lbm.config import load
    from lbm.simulation import make_case

    if output and not any("${" in o for o in overrides):
        check_writable(output_root(overrides, multirun))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for job in expand_jobs(overrides, multirun):
            make_case(load(job))


def _task(cfg: Any) -> None:
    """Hydra task: validate the composed config and simulate into Hydra's run directory."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    from lbm.config import LbmWarning, from_composed
    from lbm.simulation import simulate

    log = logging.getLogger("lbm")
    for noisy in ("jax", "matplotlib"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    def show(message: Any, category: type, *args: Any, **kwargs: Any) -> None:
        if issubclass(category, LbmWarning):
            log.warning("%s", message)
        else:
            log.debug("%s: %s", category.__name__, message)

    warnings.showwarning = show  # type: ignore[assignment]
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        run = from_composed(OmegaConf.to_container(cfg, resolve=True), HydraConfig.get().runtime.choices)
        simulate(run, run_dir)
    except LbmError as exc:
        log.error("%s", exc)
        sys.exit(fail(str(exc), exc.exit_code))
    except KeyboardInterrupt:
        sys.exit(fail(f"interrupted; partial results kept in {run_dir}", 130))


def cmd_run(args: Sequence[str]) -> int:
    """``run``: validate all jobs, then hand over to Hydra (single run or multirun)."""
    overrides, multirun, info = split_hydra_args(args)
    prevalidate(overrides, multirun, output=not info)
    return run_hydra(_task, "config", "run", args)


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


def lazy_command(module: str) -> Any:
    """A command implemented in ``module`` (its ``main(args) -> int``), imported on use."""

    def command(args: Sequence[str]) -> int:
        import importlib

        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name and module.startswith(exc.name):
                raise LbmError(f"module {module} is missing: the lbm installation is broken; reinstall it "
                               "(bash install.sh, or pip install -e .)") from None
            raise
        return int(mod.main(list(args)))

    return command


COMMANDS = {
    "run": cmd_run,
    "bench": lazy_command("lbm.bench.cli"),
    "analyze": lazy_command("lbm.profiling.analyze"),
    "compare": lazy_command("lbm.bench.compare"),
    "inspect": lazy_command("lbm.bench.inspect"),
    "validate": lazy_command("lbm.validate"),
    "study": None,  # filled below
}


def cmd_study(args: Sequence[str]) -> int:
    """``study NAME [options]``: the measurement studies (batching, compile)."""
    studies = {"batching": "lbm.bench.batching", "compile": "lbm.bench.compile_study", "export": "lbm.bench.export"}
    if not args or args[0] not in studies:
        raise LbmError(f"study: name one of {', '.join(studies)} (python -m lbm study NAME --help)")
    return lazy_command(studies[args[0]])(args[1:])


COMMANDS["study"] = cmd_study


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m lbm`` and the ``lbm`` console script; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE, end="")
        return 0
    command, rest = args[0], args[1:]
    if command not in COMMANDS:
        return fail(f"unknown command {command!r}: choose one of {', '.join(COMMANDS)} (python -m lbm --help)")
    try:
        return COMMANDS[command](rest)
    except LbmError as exc:
        return fail(str(exc), exc.exit_code)
    except KeyboardInterrupt:
        return fail("interrupted", 130)

"""Command line: ``python -m lbm run [hydra overrides]``.

Every configuration (each job of a sweep too) is composed and validated (:func:`lbm.config.load`)
before Hydra starts, and so is what only the machine and the disk can tell (:func:`prevalidate`: a
run directory holding results, the devices, the checkpoint to resume, the launcher), so that bad
input gives one line and exit code 2 and Hydra never creates or rewrites a directory for a run that
is refused. The Hydra task then finds its job's validated config in the process
(:func:`lbm.config.from_composed`). ``--help`` and ``--cfg`` compose and print; they import no JAX.
"""

from __future__ import annotations

import logging
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lbm.config import compose
from lbm.config.checks import did_you_mean
from lbm.config.command_line import (
    HELP_FLAGS,
    check_destination,
    check_fresh,
    check_launcher,
    destination,
    expand_jobs,
    hydra_value,
    pin,
    pinned,
    run_hydra,
    split_hydra_args,
)

__all__ = ["compose", "main", "prevalidate", "run_hydra", "split_hydra_args", "expand_jobs"]
from lbm.errors import LbmError

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
  study batching|compile|export|convergence|gradient
                          ensembles; compile vs run; jax.export bundle; order of accuracy; gradients
"""


def fail(message: str, code: int = 2) -> int:
    """Print one error line to stderr and return the exit code."""
    one_line = " ".join(message.split("\n"))
    print(f"lbm: error: {one_line}", file=sys.stderr)
    return code


def prevalidate(overrides: list[str], multirun: bool, output: bool = True, task: Any = None) -> list[str]:
    """Validate every job's config; with ``output`` (a run, not ``--cfg``) also the launcher, each job's devices and
    checkpoint, and every directory Hydra will write (resolved as Hydra resolves it, for the Hydra main around
    ``task``): none may hold an earlier run's results or record. Raises LbmError on the first problem, before Hydra
    creates or touches any directory; returns the Hydra overrides that pin the directories checked (lbm.config.
    command_line.pin), for a run."""
    from lbm.config import load

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        jobs = expand_jobs(overrides, multirun)
        runs = [load(job) for job in jobs]
        if not output:
            return []
        from lbm.api import preflight  # a run: the checks below import the run loop (and JAX), which it needs next

        launcher = hydra_value(overrides, "hydra/launcher") if multirun else None
        check_launcher(launcher)
        dest = destination(overrides, multirun, task or _task)
        sibling = None if multirun else sibling_process(runs[0])
        if sibling is None:
            check_destination(dest, "hydra.sweep.dir (or hydra.sweep.subdir)" if multirun else "hydra.run.dir")
        else:  # process 0's record may already be there: a sibling refuses results and its own earlier record
            check_fresh(dest.job_dirs[0], "hydra.run.dir", own_names(sibling))
        for run in runs:
            preflight(run, here=launcher in (None, "basic"))
        return pin(dest, local=launcher in (None, "basic")) + own_record(sibling, dest)


def sibling_process(run: Any) -> int | None:
    """The index of this process where the run is one of several processes given ``parallel.process_id`` > 0; else
    None (a single process, process 0, or one whose index jax.distributed reads from the environment)."""
    pid, processes = run.parallel.process_id, run.parallel.num_processes
    return pid if pid and processes is not None and processes > 1 else None


def own_record(sibling: int | None, dest: Any) -> list[str]:
    """The Hydra overrides that make process ``sibling`` write its record (hydra.output_subdir and its log file)
    under names of its own (``.hydra.process<k>``, ``lbm.process<k>.log``), so that process 0's check of the shared
    directory never meets them, whichever process starts first; none for process 0 or a single process."""
    if sibling is None:
        return []
    subdir, log = own_names(sibling)
    return [f"hydra.output_subdir={subdir}", f"hydra.job_logging.handlers.file.filename={pinned(dest.job_dirs[0] / log)}"]


def own_names(sibling: int) -> tuple[str, str]:
    """The Hydra record's names of process ``sibling`` (> 0) of a multi-process run: its output subdir and log file."""
    return f".hydra.process{sibling}", f"lbm.process{sibling}.log"


def _task(cfg: Any, named_run_dir: bool = False) -> None:
    """Hydra task: validate the composed config and simulate into Hydra's run directory.

    ``named_run_dir``: the user chose the directory (hydra.run.dir), so a resume needs another one.
    """
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    from lbm.config import LbmWarning, from_composed
    from lbm.simulation import simulate
    from lbm.simulation.signals import Interrupted

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
        message = str(exc)
        if isinstance(exc, Interrupted) and named_run_dir:
            message += " and another hydra.run.dir (this one holds the interrupted run)"
        log.error("%s", message)
        sys.exit(fail(message, exc.exit_code))
    except KeyboardInterrupt:
        sys.exit(fail(f"interrupted; partial results kept in {run_dir}", 130))


CONFIG_HELP = """usage: python -m lbm {command} [-m] [key=value ...]

Overrides set any key below (key=value) or choose an option of a group (group=option); with -m a comma-separated
value (grid.nx=64,128) runs one job per value. Hydra's flags: --cfg job|hydra|all (print the composed config),
-m/--multirun, --info, --hydra-help; hydra.run.dir=DIR (hydra.sweep.dir=DIR with -m) names the run directory.

Config groups (group=option):
{groups}

Keys and their values{given} (the comments in lbm/configs/ say what each means):
{config}"""


def config_help(command: str, config_name: str, overrides: list[str]) -> int:
    """``run --help``, ``bench --help``: the groups and the composed config, printed without JAX or Hydra's app help
    (which composes every group of Hydra's own once more)."""
    from omegaconf import OmegaConf

    from lbm.config import group_options

    cfg = compose(overrides, config_name, command)
    groups = "\n".join(f"  {g}: {', '.join(group_options(g))}" for g in ("case", "lattice", "collision") if g in cfg)
    given = f" with {' '.join(overrides)}" if overrides else ""
    print(CONFIG_HELP.format(command=command, groups=groups, given=given, config=OmegaConf.to_yaml(cfg)), end="")
    return 0


def cmd_run(args: Sequence[str]) -> int:
    """``run``: validate all jobs, then hand over to Hydra (single run or multirun)."""
    args = list(args)
    overrides, multirun, info = split_hydra_args(args)
    if any(a in ("-h", "--help") for a in args):
        return config_help("run", "config", overrides)
    if any(a in HELP_FLAGS for a in args):  # Hydra prints its own help or version and runs nothing
        return run_hydra(_task, "config", "run", args)
    multirun = multirun or hydra_value(overrides, "hydra.mode") == "MULTIRUN"  # Hydra's mode set as a key runs a sweep
    named = not multirun and hydra_value(overrides, "hydra.run.dir") is not None

    def task(cfg: Any) -> None:
        _task(cfg, named_run_dir=named)

    pins = prevalidate(overrides, multirun, output=not info, task=task)
    return run_hydra(task if not info else _task, "config", "run", [*args, *pins])


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


def cmd_bench(args: Sequence[str]) -> int:
    """``bench``: its help without loading the benchmark (nor JAX); else :mod:`lbm.bench.cli`."""
    if any(a in ("-h", "--help") for a in args):
        return config_help("bench", "bench", split_hydra_args(args, "bench")[0])
    if any(a in HELP_FLAGS for a in args):
        return run_hydra(None, "bench", "bench", list(args))
    return lazy_command("lbm.bench.cli")(args)


STUDIES = {"batching": ("lbm.bench.batching", "B vortices in one jit: Python loop, lax.map and vmap against B"),
           "compile": ("lbm.bench.compile_study", "compile time against grid and steps per dispatch; AOT; caches"),
           "export": ("lbm.bench.export", "a jax.export reproduction bundle of every stage and a fused chunk"),
           "convergence": ("lbm.bench.convergence", "the order of accuracy over a list of grids"),
           "gradient": ("lbm.bench.gradient_study", "gradients against finite differences; their time and memory")}
"""Each study's module and what it measures."""

STUDY_PARSERS = ("batching", "compile", "export")
"""Studies whose --help lbm.bench.study_args prints without importing them (they import JAX)."""

STUDY_USAGE = "usage: python -m lbm study NAME [options]   (python -m lbm study NAME --help for its options)\n\n" + \
    "studies:\n" + "".join(f"  {name:<12} {what}\n" for name, (_, what) in STUDIES.items())


def cmd_study(args: Sequence[str]) -> int:
    """``study NAME [options]``: the studies (python -m lbm study --help lists them)."""
    if args and args[0] in ("-h", "--help", "help"):
        print(STUDY_USAGE, end="")
        return 0
    if not args or args[0] not in STUDIES:
        given = f"unknown study {args[0]!r}{did_you_mean(args[0], list(STUDIES))}: " if args else ""
        raise LbmError(f"study: {given}name one of {', '.join(STUDIES)} (python -m lbm study --help)")
    if args[0] in STUDY_PARSERS and any(a in ("-h", "--help") for a in args[1:]):  # help without importing JAX
        from lbm.bench.study_args import PARSERS

        PARSERS[args[0]]().print_help()
        return 0
    return lazy_command(STUDIES[args[0]][0])(args[1:])


COMMANDS = {
    "run": cmd_run,
    "bench": cmd_bench,
    "analyze": lazy_command("lbm.profiling.analyze"),
    "compare": lazy_command("lbm.bench.compare"),
    "inspect": lazy_command("lbm.bench.inspect"),
    "validate": lazy_command("lbm.validate"),
    "study": cmd_study,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m lbm`` and the ``lbm`` console script; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE, end="")
        return 0
    command, rest = args[0], args[1:]
    if command not in COMMANDS:
        return fail(f"unknown command {command!r}{did_you_mean(command, list(COMMANDS))}: choose one of "
                    f"{', '.join(COMMANDS)} (python -m lbm --help)")
    try:
        return COMMANDS[command](rest)
    except LbmError as exc:
        return fail(str(exc), exc.exit_code)
    except KeyboardInterrupt:
        return fail("interrupted", 130)
    except SystemExit as exc:  # argparse's and Hydra's help, and a Hydra job's error (already reported)
        return exc.code if isinstance(exc.code, int) else int(exc.code is not None)

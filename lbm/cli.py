"""Command line: ``python -m lbm run [hydra overrides]``.

Every configuration (each job of a sweep too) is composed and validated (:func:`lbm.config.load`)
before Hydra starts, so bad input gives one line and exit code 2 and writes nothing. The Hydra
task then finds its job's validated config in the process (:func:`lbm.config.from_composed`).
"""

from __future__ import annotations

import logging
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lbm.config import compose
from lbm.config.command_line import (
    check_writable,
    expand_jobs,
    output_root,
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
  study batching|compile|export|convergence  ensembles; compile vs run; jax.export bundle; order of accuracy
"""


def fail(message: str, code: int = 2) -> int:
    """Print one error line to stderr and return the exit code."""
    one_line = " ".join(message.split("\n"))
    print(f"lbm: error: {one_line}", file=sys.stderr)
    return code


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
    """``study NAME [options]``: the studies (batching, compile, export, convergence)."""
    studies = {"batching": "lbm.bench.batching", "compile": "lbm.bench.compile_study", "export": "lbm.bench.export",
               "convergence": "lbm.bench.convergence", "gradient": "lbm.bench.gradient_study"}
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

"""What a run writes while it steps: the monitor rows, VTK files and frames of each chunk, and its checkpoints."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from lbm import parallel
from lbm.cases import Case, Setup
from lbm.cases.base import Snapshot
from lbm.config import RunConfig
from lbm.config.sections import mapping_of
from lbm.engines import Engine
from lbm.io.checkpoint import save_checkpoint
from lbm.kernels.collisions import COLLISION_KINDS

log = logging.getLogger("lbm")


def identity(run: RunConfig, setup: Setup) -> dict[str, Any]:
    """What a checkpoint records about its run, to refuse resuming an incompatible one."""
    return {
        "case": run.case, "lattice": run.lattice, "grid": list(setup.shape), "precision": run.precision,
        "collision": run.collision, "trt_magic": COLLISION_KINDS[run.collision].recorded(run.collision_params),
        "tau": setup.tau, "u_lattice": run.flow.u_lattice, "case_params": mapping_of(run.case_params),
    }


class Outputs:
    """Per-chunk outputs: monitor rows, VTK files and PNG frames at output intervals."""

    def __init__(self, run: RunConfig, run_dir: Path, engine: Engine) -> None:
        self.run, self.run_dir, self.engine = run, run_dir, engine
        self.monitor: list[tuple[int, float, float]] = []
        self.files: list[str] = []
        self.frames: list[Path] = []
        self.frame_limit: float | None = run.output.frame_limit
        """The colour limit of every vorticity frame: output.frame_limit, else the first frame's (set by it)."""

    def chunk_done(self, snapshot: Snapshot, mass: float, energy: float, every: int) -> None:
        """Record the monitored quantities; write VTK and frames when the chunk ends on the output interval."""
        step = snapshot.step
        self.monitor.append((step, mass, energy))
        on_interval = step % every == 0 or step == self.run.steps
        if not (self.run.output.vtk or self.run.output.frames) or not on_interval:
            return
        if not parallel.is_writer():
            snapshot.fields  # noqa: B018 (gathered on every process; process 0 writes)
            return
        fields = self.engine.setup.written_fields(snapshot.fields)
        if self.run.output.vtk:
            from lbm.io.vtk import write_vti

            path = write_vti(self.run_dir / "vtk" / f"fields_{step:010d}.vti", fields)
            self.files.append(str(path.relative_to(self.run_dir)))
        if self.run.output.frames:
            from lbm.io.plots import frame

            path = self.run_dir / "frames" / f"vorticity_{step:010d}.png"
            self.frame_limit = frame(path, fields, step, self.frame_limit)
            self.frames.append(path)



def write_checkpoint(run: RunConfig, run_dir: Path, case: Case, setup: Setup, outputs: Outputs, mass0: float,
                     at: int, pops: Any) -> Path:
    """Write the checkpoint of step ``at`` (populations, identity, the case's series), keeping the newest ones."""
    state = {**case.state(), "run/mass0": np.float64(mass0),
             "run/monitor": np.array(outputs.monitor, dtype=np.float64).reshape(-1, 3)}
    host = parallel.to_host(pops)  # every process takes part in the gather; process 0 writes
    if not parallel.is_writer():
        return run_dir / "checkpoints"
    path = save_checkpoint(run_dir / "checkpoints", at, host, identity(run, setup), state, run.checkpoint.keep)
    log.info("checkpoint %s", path.relative_to(run_dir))
    return path



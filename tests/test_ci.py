"""The CI script's accelerator lane: it fails when its environment cannot be built, unless skipped explicitly."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _lane(**env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(ROOT / "scripts" / "ci_accel.sh")], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=60)


def test_the_accel_lane_fails_when_its_environment_cannot_be_built() -> None:
    done = _lane(LBM_ACCEL_ENV_CMD="false", LBM_SKIP_ACCEL="")
    assert done.returncode == 1
    assert "could not be built" in done.stderr and "LBM_SKIP_ACCEL=1" in done.stderr


def test_the_accel_lane_is_skipped_only_when_asked_and_says_so() -> None:
    done = _lane(LBM_ACCEL_ENV_CMD="false", LBM_SKIP_ACCEL="1")
    assert done.returncode == 0
    assert "NOT run" in done.stderr


def test_ci_runs_the_readme_test_command_and_the_accel_lane() -> None:
    readme_test = (ROOT / "README.md").read_text().split("```")[1].strip().splitlines()[1].strip()
    ci_lines = [line.split() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    without_env = [" ".join(w for w in words if not w.startswith("LBM_REQUIRE_")) for words in ci_lines]
    assert readme_test in without_env
    assert "bash scripts/ci_accel.sh" in without_env

"""scripts/device_check.sh and device_wheels.sh as the lent TPU machine needs them, checked without a device.

device_check.sh runs with a stand-in python that records how it is called: every call must see the caller's
PYTHONPATH kept (on the TPU machine it names the folder of the preinstalled jax) with the repository first, and
pytest must run in one process (-n 0: one program at a time may hold the chip; no pytest-xdist there).
device_wheels.sh must carry every runtime dependency that the TPU machine lacks.
"""

from __future__ import annotations

import os
import re
import subprocess
import tomllib

from helpers.paths import REPO

FAKE_PYTHON = """#!/usr/bin/env bash
# records PYTHONPATH and the arguments; answers jax's backend query with "cpu" (the last line: sees() in the script),
# and the devices step's line that the later steps read (on_device())
printf '%s|%s\\n' "$PYTHONPATH" "$*" >> "$LOG"
cat > /dev/null  # a here-document script, if any
echo "jax's default backend: cpu"
echo cpu
"""


def test_device_check_keeps_the_callers_pythonpath_and_runs_pytest_in_one_process(tmp_path):
    fake = tmp_path / "python3"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    log = tmp_path / "calls.log"
    machine_jax = "/opt/machine-site-packages"  # stands for the folder of the TPU machine's jax
    env = {**os.environ, "LOG": str(log), "PYTHONPATH": machine_jax, "LBM_DEVICE": "cpu",
           "LBM_DEVICE_INSTALL": "preinstalled", "LBM_PYTHON": str(fake), "LBM_CHECK_BUDGET_S": "120",
           "LBM_DEVICE_CHECK_OUT": str(tmp_path / "out")}
    env.pop("OUT", None)
    proc = subprocess.run(["bash", str(REPO / "scripts" / "device_check.sh")], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the stand-in passes no test: the check says so
    calls = [line.split("|", 1) for line in log.read_text().splitlines()]
    assert len(calls) > 5
    for pythonpath, args in calls:
        parts = pythonpath.split(":")
        assert machine_jax in parts, (pythonpath, args)
        if "-m lbm" in args or "-m pytest" in args:
            assert parts[0] == str(REPO) and parts.index(machine_jax) == 1, (pythonpath, args)
    pytest_calls = [args for _, args in calls if "-m pytest" in args]
    assert pytest_calls and all(re.search(r"(^| )-n 0( |$)", a) for a in pytest_calls), pytest_calls
    assert (tmp_path / "out" / "summary.txt").exists()  # its results went where it was told, not outputs/


# lbm's runtime dependencies that the lent TPU machine has (KINDS.md, and what device_check.sh installs from the
# machine's own index: matplotlib); every other one must travel as a wheel
ON_THE_TPU_MACHINE = {"jax", "jaxlib", "numpy", "matplotlib"}


def test_device_wheels_carry_every_runtime_dependency_the_tpu_machine_lacks():
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.split(r"[<>=!;\[ ]", d, maxsplit=1)[0].lower().replace("_", "-") for d in deps}
    script = (REPO / "scripts" / "device_wheels.sh").read_text()
    carried = {m.lower().replace("_", "-") for m in re.findall(r"([A-Za-z0-9_.-]+)==[0-9]", script)}
    missing = names - ON_THE_TPU_MACHINE - carried
    assert not missing, f"device_wheels.sh does not carry {sorted(missing)} for the TPU machine"
    assert 'pyver=3.11' in script  # the TPU machine's python

"""install.sh: the newest Python >= 3.11 it finds, and one clear line for an interpreter it cannot use."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from helpers.fake_python import fake_python
from helpers.paths import REPO


def _find_python(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("LBM_PYTHON", "PYENV_ROOT")}
    base |= {"PATH": f"{tmp_path}:/usr/bin:/bin", "HOME": str(tmp_path), "PYENV_ROOT": str(tmp_path / "no-pyenv")}
    return subprocess.run(["bash", str(REPO / "install.sh"), "--find-python"], capture_output=True, text=True,
                          env=base | env, timeout=60)


@pytest.mark.parametrize("versions, newest", [
    ({"python3.11": (3, 11, 7), "python3.13": (3, 13, 0), "python3": (3, 10, 4)}, "python3.13"),
    ({"python3.11": (3, 11, 7), "python3.12": (3, 12, 1), "python3": (3, 14, 2)}, "python3"),
])
def test_install_takes_the_newest_python_found(tmp_path: Path, versions: dict, newest: str) -> None:
    for name, version in versions.items():
        fake_python(tmp_path / name, version)
    done = _find_python(tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(tmp_path / newest)


def test_install_accepts_python_3_11(tmp_path: Path) -> None:
    fake = fake_python(tmp_path / "py311", (3, 11, 0))
    done = _find_python(tmp_path, LBM_PYTHON=str(fake))
    assert (done.returncode, done.stdout.strip()) == (0, str(fake))


@pytest.mark.parametrize("version", [(3, 10, 14), (3, 9, 18)])
def test_install_refuses_an_older_python_in_one_line(tmp_path: Path, version: tuple[int, int, int]) -> None:
    fake = fake_python(tmp_path / "oldpython", version)
    done = _find_python(tmp_path, LBM_PYTHON=str(fake))
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip() == f"install.sh: LBM_PYTHON={fake} is not a Python >= 3.11"

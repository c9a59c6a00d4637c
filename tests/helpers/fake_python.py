"""A stand-in interpreter of any version, for the scripts that choose a Python (install.sh, scripts/ci_py311.sh)."""

import sys
from pathlib import Path


def fake_python(path: Path, version: tuple[int, int, int]) -> Path:
    """An executable that runs ``python -c CODE`` on this interpreter with ``sys.version_info`` set to ``version``."""
    path.write_text(f'#!/bin/sh\n[ "$1" = -c ] || exit 2\n'
                    f'exec {sys.executable} -c "import sys; sys.version_info = {version!r}; exec(sys.argv[1])" "$2"\n')
    path.chmod(0o755)
    return path

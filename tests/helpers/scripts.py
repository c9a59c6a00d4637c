"""The repository's scripts/ loaded as modules for their tests."""

from __future__ import annotations

from typing import Any

from helpers.paths import SCRIPTS


def load_script(name: str) -> Any:
    """scripts/<name>.py as a module (scripts/ also on sys.path, for the scripts' imports of each other)."""
    import importlib.util
    import sys

    scripts = SCRIPTS
    if str(scripts) not in sys.path:
        sys.path.append(str(scripts))
    spec = importlib.util.spec_from_file_location(name, scripts / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

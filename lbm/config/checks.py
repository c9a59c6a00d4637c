"""Value checks shared by every config: a value of the right type and range, else one ConfigError line naming the key.

Also where the Hydra config directory is and what a config group offers (the file names of its options).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lbm.errors import ConfigError

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"
"""The Hydra config directory: config.yaml (run), bench.yaml and the groups case/, lattice/, collision/."""

@functools.cache
def group_options(group: str) -> tuple[str, ...]:
    """The option names of a Hydra config group (the file names in configs/<group>/)."""
    return tuple(sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml")))


def did_you_mean(word: str, candidates: Sequence[str]) -> str:
    """`` (did you mean X?)`` for the candidate closest to a misspelt ``word``, else an empty string."""
    import difflib

    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.7)
    return f" (did you mean {close[0]}?)" if close else ""


def check_int(key: str, value: Any, minimum: int, maximum: int | None = None, words: str = "") -> int:
    """``value`` as an int within [minimum, maximum], else a ConfigError naming ``key`` (and ``words``, the range)."""
    rng = words or f"an integer >= {minimum}" + (f" and <= {maximum}" if maximum is not None else "")
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ConfigError(key, value, rng)
    if value < minimum or (maximum is not None and value > maximum):
        raise ConfigError(key, value, rng)
    return value


def check_float(key: str, value: Any, low: float, high: float = math.inf, *, low_open: bool = True) -> float:
    """``value`` as a finite float in (low, high), else a ConfigError naming ``key``."""
    bracket = "(" if low_open else "["
    rng = f"a number in {bracket}{low:g}, {high:g})" if high != math.inf else f"a number {'>' if low_open else '>='} {low:g}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(key, value, rng)
    value = float(value)
    if not math.isfinite(value) or value >= high or value < low or (low_open and value == low):
        raise ConfigError(key, value, rng)
    return value


def check_bool(key: str, value: Any) -> bool:
    """``value`` if it is a boolean, else a ConfigError naming ``key``."""
    if not isinstance(value, bool):
        raise ConfigError(key, value, "true or false")
    return value


def check_choice(key: str, value: Any, choices: tuple[str, ...]) -> str:
    """``value`` if it is one of ``choices``, else a ConfigError naming ``key``."""
    if not isinstance(value, str) or value not in choices:
        raise ConfigError(key, value, f"one of {', '.join(choices)}")
    return value

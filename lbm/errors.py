"""The one exception type for user errors, reported as one line with exit code 2."""

from __future__ import annotations

from typing import Any


class LbmError(Exception):
    """A user-facing error: bad input, unusable file, impossible request."""

    exit_code = 2


class ConfigError(LbmError):
    """A config key holds a value outside its valid range."""

    def __init__(self, key: str, value: Any, valid: str, hint: str = "") -> None:
        self.key, self.value, self.valid = key, value, valid
        if value is None:
            shown = "null"
        elif isinstance(value, str) and value and value.isprintable():
            shown = value
        else:
            shown = repr(value)
        msg = f"{key}={shown} is invalid: expected {valid}"
        if hint:
            msg += f" ({hint})"
        super().__init__(msg)


class DivergenceError(LbmError):
    """The simulation produced non-finite or insane values."""

    exit_code = 3

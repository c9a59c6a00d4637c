"""Progress of a run: a live bar (steps, MLUPS, ETA) on a terminal, periodic log lines otherwise."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from typing import Any

log = logging.getLogger("lbm")


def console_log() -> logging.Handler | None:
    """A handler that shows lbm's log (the progress lines among it) on stderr when nothing else would show it."""
    if logging.getLogger("lbm").handlers or logging.getLogger().handlers:
        return None
    handler = logging.StreamHandler(sys.stderr)  # on the root logger, as Hydra's: the progress bar hides its lines
    handler.setLevel(logging.INFO)
    handler.addFilter(logging.Filter("lbm"))
    handler.setFormatter(logging.Formatter("lbm: %(message)s"))
    logging.getLogger().addHandler(handler)
    return handler


@contextlib.contextmanager
def shown_log(*handlers: logging.Handler) -> Iterator[None]:
    """lbm's INFO lines on stderr where nothing else shows them, and to ``handlers`` (e.g. a run's lbm.log), while inside."""
    # a caller's own logging set-up keeps its level unless lbm's records must reach a handler of lbm's own
    console, logger = console_log(), logging.getLogger("lbm")
    level = logger.level
    for handler in handlers:
        logger.addHandler(handler)
    if (console is not None or handlers) and logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        for handler in handlers:
            logger.removeHandler(handler)
        if console is not None:
            logging.getLogger().removeHandler(console)
        logger.setLevel(level)


class _DropProgress(logging.Filter):
    """Keeps per-chunk progress records off the console while the bar shows them."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(record, "lbm_progress", False)


class Progress:
    """Reports steps done, MLUPS and ETA once per chunk; never forces a device sync of its own."""

    def __init__(self, total: int, start: int, cells: int, mode: str = "auto") -> None:
        self.total, self.start, self.cells = total, start, cells
        use_bar = mode == "bar" or (mode == "auto" and sys.stderr.isatty())
        self.quiet = mode == "none"
        self._last_logged = start
        self.bar: Any = None
        self._filters: list[tuple[logging.Handler, logging.Filter]] = []
        if use_bar and not self.quiet:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(
                TextColumn("[bold]lbm[/]"), BarColumn(), MofNCompleteColumn(), TextColumn("steps"),
                TextColumn("{task.fields[mlups]:>8.1f} MLUPS"), TextColumn("ETA"), TimeRemainingColumn(),
                transient=False,
            )
            self.task = self.bar.add_task("run", total=total, completed=start, mlups=0.0)
            self.bar.start()
            for handler in logging.getLogger().handlers:
                if type(handler) is logging.StreamHandler:
                    flt = _DropProgress()
                    handler.addFilter(flt)
                    self._filters.append((handler, flt))

    def update(self, step: int, seconds: float) -> None:
        """Record that ``step`` steps are done after ``seconds`` of stepping in this session."""
        done = step - self.start
        mlups = self.cells * done / seconds / 1e6 if seconds > 0 else 0.0
        eta = seconds / done * (self.total - step) if done > 0 else float("nan")
        if self.bar is not None:
            self.bar.update(self.task, completed=step, mlups=mlups)
        if self.quiet:
            return
        tenth = max(1, (self.total - self.start) // 10)
        if step >= self.total or step - self._last_logged >= tenth:
            self._last_logged = step
            log.info("step %d/%d  %.1f MLUPS  elapsed %.1f s  eta %.1f s", step, self.total, mlups, seconds, eta,
                     extra={"lbm_progress": True})

    def close(self) -> None:
        """Stop the bar and give the console back to the log."""
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
        for handler, flt in self._filters:
            handler.removeFilter(flt)
        self._filters = []

"""Stopping a run on SIGINT/SIGTERM: after the current chunk with a checkpoint, or at once on a second signal."""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

from lbm.errors import LbmError

log = logging.getLogger("lbm")


class Interrupted(LbmError):
    """The run was stopped by SIGINT or SIGTERM after writing a checkpoint and its results."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.exit_code = 128 + signum
        self.signum = signum


class StopSignals:
    """SIGINT/SIGTERM ask the loop to stop after the current chunk; a second one exits at once with code 130.

    The second signal is seen by a watcher thread through ``signal.set_wakeup_fd`` (written by the C-level
    handler even while the main thread waits on the device), so it does not wait for the chunk to finish:
    the watcher calls ``on_hard_exit`` (a quick record of the run), prints one line and ends the process.
    """

    HARD_EXIT_CODE = 130

    def __init__(self, on_hard_exit: Callable[[], None] | None = None) -> None:
        self.signum: int | None = None
        self.on_hard_exit = on_hard_exit
        self._previous: dict[int, Any] = {}
        self._previous_wakeup: int | None = None
        self._pipe: tuple[int, int] | None = None

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is not threading.main_thread():
            return self
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._handle)
        r, w = os.pipe()
        os.set_blocking(w, False)
        self._pipe = (r, w)
        self._previous_wakeup = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        threading.Thread(target=self._watch, args=(r,), name="lbm-stop-signals", daemon=True).start()
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is None:
            self.signum = signum
            log.warning("%s received: finishing the current chunk, then writing a checkpoint (again to stop at once)",
                        signal.Signals(signum).name)
        elif self._pipe is None:  # no watcher (not the main thread): stop at the next bytecode
            raise KeyboardInterrupt

    def _watch(self, r: int) -> None:
        """Count SIGINT/SIGTERM as the C handler reports them; exit the process at the second."""
        seen = 0
        while chunk := os.read(r, 64):
            for signum in chunk:
                if signum in (signal.SIGINT, signal.SIGTERM):
                    seen += 1
                    if seen >= 2:
                        self._hard_exit(signum)

    def _hard_exit(self, signum: int) -> None:
        try:
            if self.on_hard_exit is not None:
                self.on_hard_exit()
        finally:
            os.write(2, f"lbm: second {signal.Signals(signum).name}: stopped at once without a checkpoint of this "
                        f"chunk (exit code {self.HARD_EXIT_CODE})\n".encode())
            os._exit(self.HARD_EXIT_CODE)

    def __exit__(self, *exc: Any) -> None:
        if self._pipe is not None:
            signal.set_wakeup_fd(self._previous_wakeup if self._previous_wakeup is not None else -1)
            r, w = self._pipe
            os.close(w)  # the watcher reads end-of-file and stops; it closes nothing else
            self._pipe = None
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

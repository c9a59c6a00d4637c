"""The native kernels' first build (lbm.engines.native.build): it says when it starts and ends, how long, and where."""

import subprocess
from pathlib import Path

from lbm.engines.native import build
from lbm.engines.native.codegen import KernelSpec
from lbm.lattice import LATTICES


def test_a_build_logs_its_start_its_time_and_the_cache_path(tmp_path, monkeypatch, caplog):
    """The compiler is replaced by one that writes the library at once: the log lines, not the C++, are tested."""
    calls = []

    def fake_compile(cmd, cwd, **kwargs):
        calls.append(cmd)
        (Path(cwd) / "kernel.so").write_bytes(b"")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setenv("LBM_KERNEL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(build, "compiler", lambda: "/usr/bin/c++")
    monkeypatch.setattr(build.subprocess, "run", fake_compile)
    spec = KernelSpec(LATTICES["d2q9"], "float32", trt=False, forced=False)
    with caplog.at_level("INFO", logger="lbm"):
        out = build.build(spec)
    assert out.parent == tmp_path / "cache" and out.exists() and len(calls) == 1
    start, end = (r.getMessage() for r in caplog.records)
    assert start.startswith(f"building the native kernel {spec.tag} with c++") and str(out) in start
    assert end.startswith(f"built the native kernel {spec.tag} in ") and " s: " in end and end.endswith(str(out))
    caplog.clear()
    with caplog.at_level("INFO", logger="lbm"):
        assert build.build(spec) == out  # cached: no build, nothing logged
    assert len(calls) == 1 and not caplog.records


def test_a_build_shows_a_live_status_on_a_terminal_and_nothing_on_a_pipe(monkeypatch):
    import contextlib
    import sys

    from rich.status import Status

    from lbm.engines.native.build import build_status

    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    assert isinstance(build_status("building"), contextlib.nullcontext)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    status = build_status("building the native kernel x")
    assert isinstance(status, Status) and "building the native kernel x" in str(status.status)

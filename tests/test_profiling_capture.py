"""The Profiler's window arithmetic and bandwidth handling, with data-only arguments (no run, no trace)."""

from lbm.profiling import capture


def profiler(tmp_path, steps, mode="fused", **settings):
    return capture.Profiler(tmp_path / "profile", {"warmup_steps": 3, "steps": 10, **settings}, mode=mode, steps=steps,
                            stages=["macroscopic", "collide", "stream"], run_info={"case": "x", "grid": [8, 8]},
                            programs=list, compile_times=dict, bandwidth=lambda: {"bandwidth_gbs": 1.0})


def test_window_fits_the_run(tmp_path):
    p = profiler(tmp_path, 40)
    assert (p.warmup, p.steady, p.end) == (3, 10, 13)
    p = profiler(tmp_path, 5)  # a short run: the window shrinks, one step is always left to the steady part
    assert (p.warmup, p.steady) == (3, 2)
    p = profiler(tmp_path, 1)
    assert (p.warmup, p.steady) == (0, 1)


def test_after_the_window_fused_chunks_realign(tmp_path):
    p = profiler(tmp_path, 40)
    assert p.chunk_limit(13, 4) == 1  # loop chunk 4: 27 steps left, 3 single steps until aligned
    p._chunk = 4
    assert p.chunk_limit(16, 4) == 4  # 24 left: aligned
    assert profiler(tmp_path, 40, mode="instrumented").chunk_limit(13, 4) == 4  # nothing compiled per length


def test_bandwidth_measured_once_and_failure_is_none(monkeypatch):
    monkeypatch.setattr(capture, "_BANDWIDTH", {})
    calls = []

    def measure():
        calls.append(1)
        return {"bandwidth_gbs": 12.5}

    assert capture.measured_bandwidth(measure)["bandwidth_gbs"] == 12.5
    assert capture.measured_bandwidth(measure)["bandwidth_gbs"] == 12.5 and len(calls) == 1
    monkeypatch.setattr(capture, "_BANDWIDTH", {})

    def fails():
        raise MemoryError("no room")

    assert capture.measured_bandwidth(fails) is None

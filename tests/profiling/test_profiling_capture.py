"""The Profiler's window arithmetic and bandwidth handling, with data-only arguments (no run, no trace)."""

from lbm.profiling import capture


def profiler(tmp_path, steps, mode="fused", **settings):
    return capture.Profiler(tmp_path / "profile", {"warmup_steps": 3, "steps": 10, **settings}, mode=mode, steps=steps,
                            stages=["macroscopic", "collide", "stream"], run_info={"case": "x", "grid": [8, 8]},
                            programs=list, compile_times=dict, bandwidth=lambda: {"bandwidth_gbs": 1.0})


def drive(p, steps, k):
    """The run loop's calls: chunks of k steps, a loop clock of 1 s per step; returns the chunk sizes it ran."""
    p.running = True  # as start() leaves it, without a trace
    p._stop_trace = lambda quiet=False: setattr(p, "running", False)
    step, t_run, ran = 0, 0.0, []
    while step < steps:
        n = min(k - step % k, steps - step)
        got = p.chunk_limit(step, n, t_run)
        ran.append(got)
        step += got
        t_run += float(got)
        p.after_chunk(step, None, t_run)
    return ran


def test_the_window_is_whole_chunks_of_the_run(tmp_path):
    p = profiler(tmp_path, 40)  # 3 warm-up + 10 steady steps asked, chunks of 4
    assert drive(p, 40, 4) == [4] * 10  # the run's own chunks: nothing changed
    assert p.window == {"first_step": 0, "end_step": 16, "steps": 16, "steady_from_step": 4, "loop_seconds": 16.0,
                        "chunk_steps": 4}
    assert not p.running  # stopped after the window
    p = profiler(tmp_path, 40, mode="instrumented")
    assert drive(p, 40, 7) == [7, 7, 7, 7, 7, 5]
    assert (p.window["steady_from_step"], p.window["end_step"]) == (7, 21)  # one chunk warm-up, two steady


def test_a_run_shorter_than_the_window(tmp_path):
    p = profiler(tmp_path, 8)
    assert drive(p, 8, 8) == [8]  # one chunk: warm-up only, the window ends with the run
    assert p.window["steps"] == 8 and p.window["steady_from_step"] is None


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

"""Labels a reader sees in the reports: timeline tracks, the batching summary's memory, perfetto's refusal."""

from lbm.bench.batching import findings, mebibytes
from lbm.profiling.plots import device_lane


def test_timeline_tracks_name_the_device_plane_or_xla_cpus_host_thread():
    assert device_lane({"process_name": "/device:GPU:0", "thread_name": "Stream #14(Compute)"}) == \
        "device: /device:GPU:0 / Stream #14(Compute)"
    cpu = device_lane({"process_name": "/host:CPU", "thread_name": "python"})
    assert cpu == "XLA:CPU kernels (host thread python)" and "device: python" not in cpu


def _record(strategy, mlups, peak):
    return {"strategy": strategy, "members": 64, "compile_s": 1.0, "run_s_median": 1.0, "jaxpr_eqns": 10,
            "peak_memory_bytes": peak, "mlups": mlups, "max_abs_diff_vs_single": 0.0, "bitwise_equal_single": True}


def test_the_batching_summary_never_reports_a_bare_zero_of_memory():
    assert mebibytes(3 * 2**20) == "3.0 MiB" and mebibytes(40_000) == "0.0381 MiB"
    zero = findings([_record("map", 5.0, 0), _record("vmap", 9.0, 0)])
    assert any("peak memory not reported" in line for line in zero) and not any("0.0 MiB" in x for x in zero)
    small = findings([_record("map", 5.0, 40_000), _record("vmap", 9.0, 20_000)])
    assert any("most memory map (0.0381 MiB)" in line for line in small)

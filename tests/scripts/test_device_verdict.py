"""scripts/device_verdict.py: issue 10's real-GPU criteria read off device_check.sh's results, PASS and FAIL."""

from __future__ import annotations

import csv
import json
import tarfile
from pathlib import Path

from helpers.scripts import load_script

verdict = load_script("device_verdict")


def record(case="periodic", engine="pallas", grid=(1024, 1024), fraction=0.8, precision="float32", lattice="d2q9"):
    cells = 1
    for n in grid:
        cells *= n
    return {"case": case, "engine": engine, "grid": list(grid), "cells": cells, "precision": precision,
            "lattice": lattice, "mlups": {"median": 1000.0}, "fraction_of_roofline": fraction}


def bench(*records, gbs=4300.0):
    return {"bandwidth": {"bandwidth_gbs": gbs}, "records": list(records)}


def test_bandwidth_judges_the_large_periodic_pallas_records_only():
    doc = bench(record(fraction=0.76), record(fraction=0.74, lattice="d3q19", grid=(128, 128, 128)),
                record(case="cylinder", fraction=0.5), record(engine="xla", fraction=0.3),
                record(grid=(512, 512), fraction=0.1), record(precision="float64", fraction=0.1))
    got = verdict.bandwidth_verdicts(doc)
    assert [ok for ok, _ in got] == [True, False, None]  # 0.76 passes, 0.74 fails, the cylinder is reported
    assert "76.0 % of the same-run bandwidth (4300 GB/s" in got[0][1]
    assert verdict.bandwidth_verdicts(bench(record(fraction=None)))[0][0] is False


def breakdown(means, span):
    """breakdown.csv rows on the device clock: (status, mean ms per step) per stage row, then the step."""
    rows = [{"stage": f"s{i}", "status": status, "mean_ms": str(t), "clock": "device"} for i, (status, t) in enumerate(means)]
    return rows + [{"stage": "timestep", "status": "step", "mean_ms": "" if span is None else str(span), "clock": "device"}]


def test_breakdown_sum_within_ten_percent_of_the_step():
    # 0.9 + 0.05 + 0.03 = 0.98 ms per step against a 1 ms span; a skipped row never counts
    ok, line = verdict.breakdown_verdict(breakdown([("fused-group", 0.9), ("measured", 0.05), ("unscoped", 0.03),
                                                    ("skipped", 50.0)], 1.0))
    assert ok and "ratio 0.980" in line
    assert not verdict.breakdown_verdict(breakdown([("measured", 0.85)], 1.0))[0]  # a tenth of the step lost
    assert not verdict.breakdown_verdict(breakdown([("measured", 1.11)], 1.0))[0]  # counted twice somewhere
    assert not verdict.breakdown_verdict(breakdown([("measured", 1.0)], None))[0]  # no device time for the step


def gviz(*rows):
    """XProf's hlo_stats output: a DataTable with (hlo_op_name, occurrences, total_time in µs) rows."""
    cols = [{"id": "rank"}, {"id": "hlo_op_name"}, {"id": "occurrences"}, {"id": "total_time"}]
    return {"cols": cols, "rows": [{"c": [{"v": i}, {"v": n}, {"v": occ}, {"v": t}]} for i, (n, occ, t) in enumerate(rows)]}


def kernels(*rows):
    """kernels.csv rows: (kernel, calls, total_ms)."""
    return [{"kernel": k, "calls": str(c), "total_ms": str(t)} for k, c, t in rows]


def test_xprof_comparison_per_kernel_mean():
    ours = kernels(("fusion.1", 100, 10.0), ("fusion.2", 100, 5.0), ("copy.3", 100, 0.1))  # 100, 50, 1 µs per call
    # XProf saw twice the calls (the warm-up chunk too): the mean per call is what is compared
    theirs = verdict.gviz_rows(gviz(("fusion.1", 200, 21000.0), ("fusion.2", 200, 9500.0), ("copy.3", 200, 900.0)))
    ok, line = verdict.xprof_verdict(ours, theirs)
    assert ok and "largest difference of their mean per call 5.3 %" in line  # 50 / 47.5; copy.3 is under 1 %
    assert "100.0 % of the device time in kernels found in XProf's table by name" in line
    slower = verdict.gviz_rows(gviz(("fusion.1", 200, 21000.0), ("fusion.2", 200, 8000.0)))
    ok, line = verdict.xprof_verdict(ours, slower)
    assert not ok and "fusion.2: lbm 50.00 µs, XProf 40.00 µs" in line
    missing = verdict.gviz_rows(gviz(("fusion.1", 200, 20000.0)))
    ok, line = verdict.xprof_verdict(ours, missing)
    assert not ok and "fusion.2: not in XProf's hlo_stats" in line
    assert verdict.xprof_verdict(ours, [])[0] is False  # a CPU trace: XProf gives no ops
    assert verdict.xprof_verdict(ours, None)[0] is None  # no xprof: reported, not judged
    # kernels under 1 % each are not judged one by one, but they count in the coverage: here 45 % of the time
    many = kernels(("fusion.1", 100, 10.0), *((f"copy.{i}", 100, 0.09) for i in range(100)))
    ok, line = verdict.xprof_verdict(many, verdict.gviz_rows(gviz(("fusion.1", 100, 10000.0))))
    assert not ok and "52.6 % of the device time in kernels found" in line


def test_xprof_comparison_by_program_and_name():
    # a TPU's instrumented run: a program per stage, the same op name (copy.3) in two of them at different costs
    ours = [{"kernel": "copy.3", "program_id": "111", "calls": "10", "total_ms": "0.1"},   # 10 µs per call
            {"kernel": "copy.3", "program_id": "222", "calls": "10", "total_ms": "0.3"}]  # 30 µs per call
    cols = [{"id": "program_id"}, {"id": "hlo_op_name"}, {"id": "occurrences"}, {"id": "total_time"}]
    doc = {"cols": cols, "rows": [{"c": [{"v": p}, {"v": "copy.3"}, {"v": n}, {"v": t}]}
                                  for p, n, t in (("111", 20, 204.0), ("222", 40, 1190.0))]}
    ok, line = verdict.xprof_verdict(ours, verdict.gviz_rows(doc))
    assert ok and "by program and name" in line and "difference of their mean per call 2.0 %" in line
    # by name alone the busier program's row would stand for both: the cheap copy.3 would be 3x off
    by_name = [{k: v for k, v in r.items() if k != "program_id"} for r in ours]
    ok, line = verdict.xprof_verdict(by_name, verdict.gviz_rows(doc))
    assert not ok and "copy.3: lbm 10.00 µs, XProf 29.75 µs" in line


def lay_out(folder: Path, fraction: float, totals) -> None:
    """device_check.sh's folder: bench-*/bench.json, profile-{fused,instrumented}/profile/ (breakdown.csv,
    kernels.csv, xprof_hlo_stats.json), summary.txt."""
    for lat, grid in (("d2q9", (1024, 1024)), ("d3q19", (128, 128, 128))):
        (folder / f"bench-{lat}").mkdir(parents=True)
        doc = bench(record(fraction=fraction, lattice=lat, grid=grid))
        (folder / f"bench-{lat}" / "bench.json").write_text(json.dumps(doc))
    for mode in ("fused", "instrumented"):
        profile = folder / f"profile-{mode}" / "profile"
        profile.mkdir(parents=True)
        rows = breakdown(totals, 1.0)
        with (profile / "breakdown.csv").open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        with (profile / "kernels.csv").open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=["kernel", "calls", "total_ms"])
            writer.writeheader()
            writer.writerows(kernels(("fusion.1", 20, 19.0)))
        (profile / "xprof_hlo_stats.json").write_text(json.dumps(gviz(("fusion.1", 40, 39000.0))))
    (folder / "summary.txt").write_text("device_check: ...\n")


def test_main_reads_the_folder_and_the_returned_tarball(tmp_path, capsys):
    good = tmp_path / "outputs" / "device-check"
    lay_out(good, 0.8, [("fused-group", 0.95)])
    assert verdict.main([str(good)]) == 0
    # two bandwidths; per mode (fused, instrumented) the breakdown and the XProf cross-check
    assert capsys.readouterr().out.count("PASS") == 6
    # the run tool's returned files: the bench copies beside device-check.tgz, the breakdown's json only in the tgz
    returned = tmp_path / "returned"
    returned.mkdir()
    with tarfile.open(returned / "device-check.tgz", "w:gz") as tar:
        tar.add(good, arcname="outputs/device-check")
    assert verdict.main([str(returned)]) == 0
    assert capsys.readouterr().out.count("PASS") == 6
    bad = tmp_path / "bad"
    lay_out(bad, 0.6, [("fused-group", 0.95)])
    assert verdict.main([str(bad)]) == 1
    out = capsys.readouterr().out
    assert out.count("FAIL  bandwidth") == 2 and out.count("PASS  breakdown") == 2
    assert verdict.main([str(tmp_path / "missing")]) == 2
    empty = tmp_path / "empty"
    empty.mkdir()
    assert verdict.main([str(empty)]) == 1  # no data is a failure, not a pass


def test_an_instrumented_breakdown_is_judged_on_a_tpu_only(tmp_path, capsys):
    # a GPU's instrumented step on the device clock is its window (dispatch waits included): reported, not judged
    for device, expect in (("cuda:NVIDIA H200", "INFO  breakdown instrumented: not judged on cuda:NVIDIA H200"),
                           ("tpu:TPU v5 lite", "FAIL  breakdown instrumented: stages sum to 0.5000 ms")):
        folder = tmp_path / device.split(":")[0]
        lay_out(folder, 0.8, [("measured", 0.5)])  # half the step: fails where judged
        for mode in ("fused", "instrumented"):
            (folder / f"profile-{mode}" / "metrics.json").write_text(json.dumps({"device": device}))
        assert verdict.main([str(folder)]) == 1  # the fused breakdown fails on both
        assert expect in capsys.readouterr().out

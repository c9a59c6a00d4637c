"""scripts/device_verdict.py: issue 10's real-GPU criteria read off device_check.sh's results, PASS and FAIL."""

from __future__ import annotations

import csv
import json
import tarfile
from pathlib import Path

from conftest import load_script

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


def breakdown(totals, span, steps=20):
    rows = [{"stage": f"s{i}", "status": status, "device_total_ms": str(t)} for i, (status, t) in enumerate(totals)]
    doc = {"timestep": {"calls": steps, "device_median_ms": span, "device_busy_median_ms": span and span * 0.98},
           "attribution": {"steady_steps": steps}}
    return rows, doc


def test_breakdown_sum_within_ten_percent_of_the_step():
    # 20 steps: 18 ms + 1 ms + 0.6 ms = 19.6 ms, 0.98 ms per step against a 1 ms span; a skipped row never counts
    rows, doc = breakdown([("fused-group", 18.0), ("measured", 1.0), ("unscoped", 0.6), ("skipped", 50.0)], 1.0)
    ok, line = verdict.breakdown_verdict(rows, doc)
    assert ok and "ratio 0.980" in line
    assert not verdict.breakdown_verdict(*breakdown([("measured", 17.0)], 1.0))[0]  # 0.85: a tenth of the step lost
    assert not verdict.breakdown_verdict(*breakdown([("measured", 22.2)], 1.0))[0]  # 1.11: counted twice somewhere
    assert not verdict.breakdown_verdict(*breakdown([("measured", 20.0)], None))[0]  # no device time for the step


def lay_out(folder: Path, fraction: float, totals) -> None:
    """device_check.sh's folder: bench-*/bench.json, profile-fused/profile/breakdown.{csv,json}, summary.txt."""
    for lat, grid in (("d2q9", (1024, 1024)), ("d3q19", (128, 128, 128))):
        (folder / f"bench-{lat}").mkdir(parents=True)
        doc = bench(record(fraction=fraction, lattice=lat, grid=grid))
        (folder / f"bench-{lat}" / "bench.json").write_text(json.dumps(doc))
    profile = folder / "profile-fused" / "profile"
    profile.mkdir(parents=True)
    rows, doc = breakdown(totals, 1.0)
    with (profile / "breakdown.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (profile / "breakdown.json").write_text(json.dumps(doc))
    (folder / "summary.txt").write_text("device_check: ...\n")


def test_main_reads_the_folder_and_the_returned_tarball(tmp_path, capsys):
    good = tmp_path / "outputs" / "device-check"
    lay_out(good, 0.8, [("fused-group", 19.0)])
    assert verdict.main([str(good)]) == 0
    assert capsys.readouterr().out.count("PASS") == 3
    # the run tool's returned files: the bench copies beside device-check.tgz, the breakdown's json only in the tgz
    returned = tmp_path / "returned"
    returned.mkdir()
    with tarfile.open(returned / "device-check.tgz", "w:gz") as tar:
        tar.add(good, arcname="outputs/device-check")
    assert verdict.main([str(returned)]) == 0
    bad = tmp_path / "bad"
    lay_out(bad, 0.6, [("fused-group", 19.0)])
    assert verdict.main([str(bad)]) == 1
    out = capsys.readouterr().out
    assert out.count("FAIL  bandwidth") == 2 and "PASS  breakdown" in out
    assert verdict.main([str(tmp_path / "missing")]) == 2
    empty = tmp_path / "empty"
    empty.mkdir()
    assert verdict.main([str(empty)]) == 1  # no data is a failure, not a pass

"""scripts/auto_sweep.py: engine=auto's pick against the other engines for any run configuration (issue 38 item 4)."""

from __future__ import annotations

import json

from helpers.scripts import load_script

sweep = load_script("auto_sweep")


def test_the_verdict_allows_auto_ten_percent_and_no_more():
    assert sweep.verdict({"auto": 100.0, "xla": 90.0}, "pallas") == {
        "fastest": "pallas", "fastest_over_auto": 0.0, "ok": True}
    close = sweep.verdict({"auto": 100.0, "xla": 109.0}, "pallas")
    assert close["fastest"] == "xla" and close["ok"] and abs(close["fastest_over_auto"] - 0.09) < 1e-12
    assert not sweep.verdict({"auto": 100.0, "xla": 111.0, "native": 50.0}, "pallas")["ok"]


def test_a_sweep_times_auto_beside_the_other_engine_and_records_it(tmp_path, capsys):
    out = tmp_path / "sweep.json"
    rc = sweep.main(["--engines", "xla", "--rounds", "2", "--min-time", "0.01", "--chunk", "2", "--out", str(out),
                     "case=taylor_green grid.nx=8 grid.ny=8", "case=nope"])
    (rec, bad) = json.loads(out.read_text())
    assert rec["grid"] == [8, 8] and rec["auto"]["picked"] in ("native", "xla")  # a CPU: native where it builds
    timed = {n: r for n, r in rec["engines"].items() if "median" in r}
    assert set(timed) == {"auto", "xla"} - ({"xla"} if rec["auto"]["picked"] == "xla" else set())
    assert all(len(r["mlups"]) == 2 and r["median"] > 0 and r["compile_s"] > 0 for r in timed.values())
    assert rec["verdict"]["ok"] == (rc == 0)
    assert "case=nope" in bad["error"]  # a bad configuration is reported and the sweep goes on
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("case=taylor_green grid.nx=8 grid.ny=8 8x8: auto=") and "case=nope" in lines[2]

"""python -m lbm bench: the bench.json contract on a tiny grid, input validation, sweeps of sizes.

Speed is never asserted here (DESIGN: performance figures come from the bench, not from
assertions on wall time); these tests check that the bench measures what it says and
records every contract field with its unit.
"""

import json
import math

import pytest
from helpers.paths import REPO

from lbm.bench.cli import compose_bench, plan
from lbm.cli import main

TINY = ["grid.nx=32", "grid.ny=24", "cylinder_grid.nx=60", "cylinder_grid.ny=36", "repeats=2", "warmup=1",
        "steps=4", "stage_steps=1", "bandwidth.bytes=4194304", "bandwidth.repeats=2"]

RECORD_KEYS = {"case", "lattice", "grid", "cells", "mode", "engine", "variant", "precision", "storage", "collision",
               "mlups", "effective_gbs", "bytes_per_cell_update", "fraction_of_roofline", "roofline_mlups",
               "compile_s", "steps_per_repeat", "repeats", "clock"}
FUSED_KEYS = {"fusions", "custom_calls", "cost_analysis_bytes_accessed", "memory"}


@pytest.fixture(scope="module")
def bench_doc(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("bench") / "run"
    code = main(["bench", *TINY, f"hydra.run.dir={run_dir}"])
    assert code == 0
    return json.loads((run_dir / "bench.json").read_text()), run_dir


@pytest.mark.slow
def test_bench_json_holds_every_contract_field(bench_doc):
    doc, run_dir = bench_doc
    env = doc["environment"]
    for key in ("jax", "jaxlib", "python", "device", "cpu_model", "XLA_FLAGS", "platform"):
        assert key in env, key
    assert env["jax"] and env["python"] and env["device"]
    bw = doc["bandwidth"]
    assert {"copy", "triad", "copy_2buf", "triad_2buf"} <= set(bw["kernels"])
    for kernel in bw["kernels"]:
        assert bw[kernel]["median_gbs"] > 0 and bw[kernel]["min_gbs"] <= bw[kernel]["max_gbs"]
    # the roofline: the fastest kernel to memory (of all of them where the arrays fit in the cache, flagged)
    usable = [k for k in bw["kernels"] if bw[k]["cache_resident"] is False and "note" not in bw[k]]
    assert bw["roofline_cache_resident"] == (not usable)
    assert bw["bandwidth_gbs"] == max(bw[k]["median_gbs"] for k in usable or bw["kernels"])
    assert "GB/s" in bw["unit"]
    # measured before and after the configurations; the roofline is the larger
    assert len(bw["runs"]) == 2 and bw["bandwidth_gbs"] == max(r["bandwidth_gbs"] for r in bw["runs"])
    records = doc["records"]
    variants = {(r["case"], r["variant"]) for r in records}
    assert variants == {("periodic", "auto"), ("periodic", "xla"), ("periodic", "naive"), ("periodic", "instrumented"),
                        ("cylinder", "auto"), ("cylinder", "xla"), ("cylinder", "instrumented")}
    for r in records:
        assert RECORD_KEYS <= r.keys(), RECORD_KEYS - r.keys()
        m = r["mlups"]
        assert len(m["values"]) == r["repeats"] == 2
        assert m["min"] <= m["median"] <= m["max"] and m["median"] > 0
        assert m["spread_pct"] == pytest.approx(100 * (m["max"] - m["min"]) / m["median"])
        cells = math.prod(r["grid"])
        assert r["cells"] == cells
        # effective GB/s, roofline and fraction against the minimum traffic of a D2Q9 float32 update, counted here:
        # each of the 9 populations read once and written once, 4 bytes each
        assert r["bytes_per_cell_update"] == 2 * 9 * 4
        assert r["effective_gbs"] == pytest.approx(m["median"] * 1e6 * 72 / 1e9)
        assert r["gbs_over_roofline"] == pytest.approx(m["median"] * 1e6 * 72 / 1e9 / bw["bandwidth_gbs"])
        # a fraction of the roofline only where memory bounds the run: not for a working set in the cache
        assert r["cache_resident"] == (r["working_set_bytes"] <= bw["cache_bytes"])
        assert r["fraction_of_roofline"] == (None if r["cache_resident"] else r["gbs_over_roofline"])
        assert r["roofline_mlups"] == pytest.approx(bw["bandwidth_gbs"] * 1e9 / 72 / 1e6)
        assert r["compile_s"] > 0
        if r["mode"] in ("fused", "naive"):
            assert FUSED_KEYS <= r.keys()
            assert r["memory"]["planned_peak_bytes"] >= r["memory"]["population_bytes"]
        if r["mode"] == "instrumented":
            stages = r["stages"]
            assert {"macroscopic", "equilibrium", "collide", "stream"} <= stages.keys()
            assert sum(s["share"] for s in stages.values()) == pytest.approx(1.0)
            assert all(s["median_ms"] > 0 for s in stages.values())
            assert EVIDENCE_KEYS <= r["evidence"].keys() and set(r["evidence"]["stages"]) == stages.keys()
        assert r["lattice"] == "d2q9" and r["precision"] == "float32"
    cyl = [r for r in records if r["case"] == "cylinder"]
    assert {r["grid"][0] for r in cyl} == {60} and "outflow" in next(r for r in cyl if r["mode"] == "instrumented")["stages"]
    assert any(s["reason"] for s in doc["skipped"])  # the naive step has no cylinder
    rows = {row["case"]: row for row in doc["summary"]}
    assert rows["periodic"]["speedup_vs_naive"] == pytest.approx(
        rows["periodic"]["mlups"][rows["periodic"]["fused_variant"]] / rows["periodic"]["mlups"]["naive"])
    assert (run_dir / ".hydra" / "config.yaml").exists()


EVIDENCE_KEYS = {"chunk_steps", "steps_per_loop_body", "kernels_per_step", "bytes_per_cell_step",
                 "cost_bytes_per_cell_step", "cost_flops_per_cell_step", "custom_call_targets", "kernels"}


def test_bench_json_contract_fast(tmp_path):
    """The fast lane's representative of bench.json (DESIGN.md): environment, measured bandwidth, one record with
    MLUPS, GB/s, roofline fraction, compile seconds, and the structural evidence that identical code reproduces."""
    from lbm.bench.evidence import EVIDENCE_STEPS
    from lbm.bench.throughput import BenchConfig, Timing, measure

    run_dir = tmp_path / "run"
    assert main(["bench", "cases=[periodic]", "variants=[xla]", "grid.nx=16", "grid.ny=16", "repeats=2",
                 "min_time_s=0.001", "kernel_profile=0", "bandwidth.bytes=1048576", "bandwidth.repeats=1",
                 f"hydra.run.dir={run_dir}"]) == 0
    doc = json.loads((run_dir / "bench.json").read_text())
    assert {"jax", "jaxlib", "python", "device", "cpu_model", "XLA_FLAGS"} <= doc["environment"].keys()
    assert len(doc["load_average_start"]) == len(doc["load_average_end"]) == 3
    bw = doc["bandwidth"]["bandwidth_gbs"]
    (r,) = doc["records"]
    assert RECORD_KEYS <= r.keys() and r["mode"] == "fused" and r["grid"] == [16, 16]
    n = r["steps_per_repeat"]
    assert n >= 2 and n & (n - 1) == 0  # steps=auto: a power of two
    assert r["gbs_over_roofline"] == pytest.approx(r["mlups"]["median"] * 1e6 * 72 / 1e9 / bw)
    assert r["fraction_of_roofline"] == (None if r["cache_resident"] else r["gbs_over_roofline"])
    ev = r["evidence"]
    assert EVIDENCE_KEYS <= ev.keys() and ev["chunk_steps"] == EVIDENCE_STEPS
    assert ev["kernels_per_step"] == len(ev["kernels"]) / ev["steps_per_loop_body"] > 0
    assert ev["bytes_per_cell_step"] >= 72 and ev["cost_flops_per_cell_step"] > 0
    assert ev["bytes_per_cell_step"] == pytest.approx(sum(k["bytes_per_cell_step"] for k in ev["kernels"]))
    # the same configuration timed for another number of steps: the same evidence
    again = measure(BenchConfig("periodic", "d2q9", (16, 16), "xla"), Timing(repeats=1, warmup=0, steps=2 * n,
                                                                            kernel_profile=0), None)
    assert again["steps_per_repeat"] != n and again["evidence"] == ev


@pytest.mark.slow
def test_bench_prints_a_table_with_units(tmp_path, monkeypatch, capfd):
    monkeypatch.chdir(tmp_path)  # in this process (one of its own cost 2 CPU-s more); the default run directory
    assert main(["bench", *TINY, "cases=[periodic]", "variants=[xla,naive]", "repeats=1", "bandwidth.enabled=false"]) == 0
    out, err = capfd.readouterr()
    assert "MLUPS" in out and "GB/s" in out and " s " in out
    assert "wrote" in err and "bench" in err  # progress lines and the result path
    files = list((tmp_path / "outputs" / "bench").glob("*/*/bench.json"))
    assert len(files) == 1
    doc = json.loads(files[0].read_text())
    assert doc["bandwidth"] is None and all("fraction_of_roofline" not in r for r in doc["records"])


BAD = [
    (["grid.nx=3"], "grid.nx"),
    (["variants=[turbo]"], "variants"),
    (["cases=[moon]"], "cases"),
    (["precision=float16"], "precision"),
    (["lattice=d3q19"], "grid.nz"),
    (["repeats=0"], "repeats"),
    (["no_such_key=1"], "no_such_key"),
    (["output=../x.json"], "output"),
    (["sizes=[2]"], "sizes"),
    (["grid.nx=64,128"], "-m"),
    (["collisions=[]"], "collisions=[]"),
    (["collisions=[bgk,turbo]"], "collisions=turbo"),
    (["collisions=[bgk,kbc,bgk]"], "each collision once"),
    (["collisions=[bgk,auto]"], "collisions=auto"),  # auto is a case's pick for a run, not a kernel to time
    (["collision=trt", "collisions=[bgk,kbc]"], "collision=trt"),
    (["lattice=d3q19", "grid.nz=16", "collisions=[bgk,cumulant]"], "cumulant runs on d2q9, d3q27 only"),
    (["lattice=d3q19", "grid.nz=16", "collision=cumulant"], "collision=cumulant"),
]


@pytest.mark.parametrize("args,key", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_bench_input_gives_one_clean_line(args, key, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["bench", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("lbm: error: ") and key in err[0]
    assert not (tmp_path / "outputs").exists()


def test_plan_expands_sizes_precisions_and_skips_impossible_pairs():
    p = plan(compose_bench(["sizes=[16,[32,24]]", "precision=[float32,f16-storage]", "variants=[auto,naive,instrumented]"]))
    configs = p["configs"]
    periodic = [(c.grid, c.precision, c.variant, skip) for c, skip in configs if c.case == "periodic"]
    assert {g for g, *_ in periodic} == {(16, 16), (32, 24)}
    assert len(periodic) == 2 * 2 * 3
    skipped = {(prec, var) for _, prec, var, skip in periodic if skip}
    assert skipped == {("f16-storage", "naive"), ("f16-storage", "instrumented")}
    cylinder = [(c.variant, skip) for c, skip in configs if c.case == "cylinder"]
    assert dict(cylinder)["naive"] is not None
    assert p["timing"].steps is None and p["bandwidth"]["enabled"] is True


def test_the_cavity_runs_on_the_boxs_grids_with_its_walls():
    """cases=[cavity]: the lid-driven cavity on the periodic box's sizes (what the walls cost per cell, one run)."""
    from lbm.bench.throughput import make_setup

    p = plan(compose_bench(["sizes=[16,[32,24]]", "cases=[periodic,cavity]", "variants=[xla]"]))
    grids = {case: [c.grid for c, _ in p["configs"] if c.case == case] for case in ("periodic", "cavity")}
    assert grids["cavity"] == grids["periodic"] == [(16, 16), (32, 24)]
    cavity = next(c for c, _ in p["configs"] if c.case == "cavity")
    setup = make_setup(cavity)
    assert setup.shape == (16, 16) and setup.boundaries  # its walls and lid, not the periodic box


@pytest.mark.slow
def test_bench_runs_the_cavity(tmp_path):
    run_dir = tmp_path / "bench"
    assert main(["bench", "cases=[cavity]", "variants=[xla]", "grid.nx=12", "grid.ny=12", "repeats=1", "steps=2",
                 "kernel_profile=0", "bandwidth.enabled=false", f"hydra.run.dir={run_dir}"]) == 0
    (record,) = json.loads((run_dir / "bench.json").read_text())["records"]
    assert record["case"] == record["case_config"] == "cavity" and record["mlups"]["median"] > 0


def test_plan_measures_each_collision_and_groups_the_collisions_of_a_variant():
    from lbm.bench.cli import measured_groups
    from lbm.bench.throughput import BenchConfig

    p = plan(compose_bench(["collisions=[bgk,kbc]", "cases=[periodic]", "variants=[native,naive]"]))
    assert p["collisions"] == ["bgk", "kbc"]
    configs = [(c.variant, c.collision, skip) for c, skip in p["configs"]]
    assert [(v, c) for v, c, _ in configs] == [("native", "bgk"), ("native", "kbc"), ("naive", "bgk"), ("naive", "kbc")]
    assert [bool(skip) for *_, skip in configs] == [False, False, False, True]  # the naive step is BGK only
    todo = [c for c, skip in p["configs"] if skip is None]
    assert [[(c.variant, c.collision) for c in g] for g in measured_groups(todo, True)] == [
        [("native", "bgk"), ("native", "kbc")], [("naive", "bgk")]]
    assert [len(g) for g in measured_groups(todo)] == [1, 1, 1]  # without collisions=: each one alone
    # a same-run peer joins every variant and collision of its configuration
    assert len(measured_groups([*todo, BenchConfig("periodic", "d2q9", (1024, 1024), "lbmpy")], True)) == 1


def test_interleaved_collisions_of_a_variant_run_the_steps_of_its_first(monkeypatch):
    from lbm.bench import throughput
    from lbm.bench.throughput import BenchConfig

    given = []

    class Fake:  # steps=auto: each configuration alone would choose its own steps
        def __init__(self, cfg, timing, progress=None):
            given.append((cfg.variant, cfg.collision, timing.steps))
            self.cfg, self.n = cfg, timing.steps or {"native": 64, "xla": 8}[cfg.variant] * (1 + (cfg.collision != "bgk"))

        def repeat(self):
            pass

        def record(self, bandwidth):
            return {"steps_per_repeat": self.n}

    monkeypatch.setattr(throughput, "Measurement", Fake)
    cfgs = [BenchConfig("periodic", "d3q27", (8, 8, 8), v, collision=c) for v in ("native", "xla")
            for c in ("bgk", "kbc", "cumulant")]
    out = throughput.measure_interleaved(cfgs, throughput.Timing(repeats=1))
    assert given == [("native", "bgk", None), ("native", "kbc", 64), ("native", "cumulant", 64),
                     ("xla", "bgk", None), ("xla", "kbc", 8), ("xla", "cumulant", 8)]
    assert [r["steps_per_repeat"] for r in out] == [64, 64, 64, 8, 8, 8]


@pytest.mark.slow
def test_multirun_sweep_writes_one_bench_json_per_job(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # in this process (one of its own cost more CPU); the default sweep directory
    assert main(["bench", "-m", "grid.nx=16,24", "grid.ny=16", "cases=[periodic]", "variants=[xla]", "steps=2",
                 "repeats=1", "warmup=0", "bandwidth.enabled=false"]) == 0
    files = sorted((tmp_path / "outputs" / "multirun").glob("*/*/*/bench.json"))
    assert len(files) == 2
    assert sorted(json.loads(f.read_text())["records"][0]["grid"][0] for f in files) == [16, 24]


def test_every_data_file_is_in_the_package_data():
    """An installed (non-editable) lbm holds only what [tool.setuptools.package-data] lists: every file but .py."""
    import fnmatch
    import tomllib

    repo = REPO
    globs = tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["lbm"]
    data = [p.relative_to(repo / "lbm").as_posix() for p in (repo / "lbm").rglob("*")
            if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts]
    assert "configs/bench.yaml" in data
    missing = [d for d in data if not any(fnmatch.fnmatch(d, g) and d.count("/") == g.count("/") for g in globs)]
    assert not missing, f"not installed by pip install (add to package-data): {missing}"


@pytest.mark.parametrize("lattice", ["d2q9", pytest.param("d3q19", marks=pytest.mark.slow),
                                     pytest.param("d3q27", marks=pytest.mark.slow)])
def test_naive_baseline_is_the_same_bgk_step(lattice):
    """The naive step computes what the stage kernels compute (collide then stream), only slower."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from lbm.bench.naive import naive_runner, naive_step
    from lbm.kernels.equilibrium import equilibrium
    from lbm.kernels.macroscopic import macroscopic
    from lbm.kernels.streaming import stream
    from lbm.lattice import LATTICES

    jax.config.update("jax_enable_x64", True)
    lat = LATTICES[lattice]
    shape = (6, 5) if lat.d == 2 else (4, 3, 5)
    rng = np.random.default_rng(1)
    f = jnp.asarray(lat.w.reshape((-1,) + (1,) * lat.d) * 0.1 * rng.standard_normal((lat.q,) + shape))  # f - w
    drho, u = macroscopic(f, lat)
    ref = stream(f - 1.3 * (f - equilibrium(drho, u, lat)), lat)
    np.testing.assert_allclose(naive_step(f, lat, 1.3), ref, rtol=1e-14, atol=1e-16)
    two = naive_step(naive_step(f, lat, 1.3), lat, 1.3)
    np.testing.assert_allclose(naive_runner(lat, 1.3, 2)(f + 0), two, rtol=1e-14, atol=1e-16)


@pytest.mark.slow  # three collisions compiled and timed (kbc's compile the longest); the fast lane keeps collisions
# timed in turn with their ratio over the first in test_cpu_time_is_no_throughput_where_the_work_runs_on_an_accelerator
def test_collisions_are_timed_in_turn_and_each_over_the_first(tmp_path, capsys):
    """``collisions=[...]``: one record per collision, all of one configuration timed in the same rounds with the same
    steps; the summary's time over the first listed collision is the median of the rounds' ratios, by both clocks."""
    import statistics

    run_dir = tmp_path / "run"
    assert main(["bench", "collisions=[bgk,trt,kbc]", "cases=[periodic]", "variants=[xla]", "grid.nx=16",
                 "grid.ny=16", "repeats=3", "steps=4", "kernel_profile=0", "bandwidth.enabled=false",
                 f"hydra.run.dir={run_dir}"]) == 0
    out = capsys.readouterr().out
    doc = json.loads((run_dir / "bench.json").read_text())
    xla = doc["records"]
    assert [r["collision"] for r in xla] == ["bgk", "trt", "kbc"] and {r["variant"] for r in xla} == {"xla"}
    assert all(r["steps_per_repeat"] == 4 and r["repeats"] == 3 for r in xla)
    assert len({r["interleaved"] for r in xla}) == 1 and "xla bgk / xla trt / xla kbc" in xla[0]["interleaved"]
    rows = {s["collision"]: s for s in doc["summary"]}
    assert all(s["baseline_collision"] == "bgk" for s in rows.values()) and "time_over_baseline" not in rows["bgk"]
    bgk = xla[0]["mlups"]
    for rec in xla[1:]:
        ratio = rows[rec["collision"]]["time_over_baseline"]
        assert set(ratio) == {"xla"} and ratio["xla"]["rounds"] == 3
        for clock, values in (("cpu", "cpu_values"), ("wall", "values")):
            per_round = [b / a for a, b in zip(rec["mlups"][values], bgk[values], strict=True)]
            assert ratio["xla"][clock] == pytest.approx(statistics.median(per_round), rel=1e-12)
        # the wall clock's ratio of the medians lies between the rounds' extremes (order statistics are monotone)
        assert min(per_round) <= bgk["median"] / rec["mlups"]["median"] <= max(per_round)
    assert "collisions against bgk" in out and "time / bgk (CPU)" in out


def test_steps_auto_take_the_fastest_probe(monkeypatch):
    """A neighbour's burst that slows one 2-step probe call does not cut the steps per repeat (fake clock)."""
    from lbm.bench import throughput

    class Clock:
        now = 0.0

        def perf_counter(self):
            return self.now

    clock = Clock()
    calls = iter([0.0, 0.4, 0.01, 0.02])  # the untimed first call, then a burst, then the kernel's own 5 ms a step

    class Runner:
        def compile(self, f, n):
            return 0.0

        def start(self, f):
            return f

        def run(self, f, n):
            clock.now += next(calls)
            return f

    monkeypatch.setattr(throughput, "time", clock)
    n = throughput.auto_steps(Runner(), 0, throughput.Timing(min_time_s=0.5))
    assert n == 128  # 0.5 s / 5 ms = 100 steps, rounded up to a power of two (the slowed first probe alone would give 4)


def test_cpu_time_is_no_throughput_where_the_work_runs_on_an_accelerator(tmp_path, capsys, monkeypatch):
    """On a TPU the process's CPU time is the host's dispatch (near zero): the records of work there carry no
    CPU-time MLUPS, say why, and the collisions table prints n/a instead (the platform stubbed, the work on this CPU)."""
    from lbm.bench import throughput

    monkeypatch.setattr(throughput._FusedRunner, "platform", lambda self, state: "tpu")
    run_dir = tmp_path / "run"
    assert main(["bench", "collisions=[bgk,trt]", "cases=[periodic]", "variants=[xla]", "grid.nx=16", "grid.ny=16",
                 "repeats=2", "steps=2", "kernel_profile=0", "bandwidth.enabled=false",
                 f"hydra.run.dir={run_dir}"]) == 0
    out = capsys.readouterr().out
    doc = json.loads((run_dir / "bench.json").read_text())
    for rec in doc["records"]:
        assert rec["work_platform"] == "tpu" and rec["mlups"]["cpu_values"] is None
        assert rec["cpu_clock"].startswith("n/a: the work runs on the tpu")
        assert len(rec["mlups"]["values"]) == 2  # the wall clock still times every repeat
    ratio = {s["collision"]: s for s in doc["summary"]}["trt"]["time_over_baseline"]["xla"]
    assert ratio["cpu"] is None and ratio["wall"] > 0
    assert out.count("n/a (tpu)") == 4  # MLUPS (CPU) and time / bgk (CPU) of both rows


def test_records_of_work_on_the_host_keep_their_cpu_time(monkeypatch):
    from lbm.bench.throughput import CPU_CLOCK, cpu_clock, cpu_mlups

    assert cpu_mlups(1_000_000, [0.5, 0.25], "cpu") == [2.0, 4.0] and cpu_clock("cpu") == CPU_CLOCK
    assert cpu_mlups(1_000_000, [1e-6], "gpu") is None and "n/a" in cpu_clock("gpu")


def _record(grid, mlups, planned=None):
    cells = math.prod(grid)
    rec = {"case": "periodic", "lattice": "d2q9", "collision": "bgk", "variant": "native", "precision": "float32",
           "grid": list(grid), "cells": cells, "bytes_per_cell_update": 72, "effective_gbs": mlups * 72 / 1e3}
    if planned:
        rec["memory"] = {"planned_peak_bytes": planned}
    return rec


def test_a_working_set_in_the_cache_is_marked_cache_resident_not_a_fraction_of_memory_bandwidth():
    from lbm.bench.throughput import CACHE_RESIDENT, apply_roofline

    small = _record((512, 512), 1000.0)  # 9 MiB of populations: in a 32 MiB cache
    apply_roofline(small, 50.0, cache_bytes=32 * 2**20)
    assert small["working_set_bytes"] == 512 * 512 * 36 and small["cache_resident"] is True
    assert small["fraction_of_roofline"] is None and small["roofline_check"] == CACHE_RESIDENT
    assert small["gbs_over_roofline"] == pytest.approx(72.0 / 50.0)  # the ratio stays, named as what it is
    big = _record((512, 512), 600.0, planned=64 * 2**20)  # the compiled program's planned peak decides
    apply_roofline(big, 50.0, cache_bytes=32 * 2**20)
    assert big["cache_resident"] is False and big["fraction_of_roofline"] == pytest.approx(43.2 / 50.0)
    assert big["roofline_check"] == "ok" and "memory_analysis" in big["working_set_source"]
    unknown = _record((512, 512), 600.0)  # no cache size (an accelerator): no mark, the fraction as it is
    apply_roofline(unknown, 50.0, cache_bytes=None)
    assert unknown["cache_resident"] is None and unknown["fraction_of_roofline"] == pytest.approx(43.2 / 50.0)
    apply_roofline(unknown, None)
    assert "fraction_of_roofline" not in unknown and "cache_resident" not in unknown


def test_a_memory_bound_record_above_the_roofline_says_the_probe_is_wrong(capsys):
    from lbm.bench.report import print_table
    from lbm.bench.throughput import ABOVE_ROOFLINE, apply_roofline, roofline_warnings

    above = _record((4096, 4096), 700.0)  # 50.4 GB/s over a 45 GB/s probe, 576 MiB: not in any cache
    cached = _record((256, 256), 900.0)
    for rec in (above, cached):
        apply_roofline(rec, 45.0, cache_bytes=32 * 2**20)
        rec.update(engine="native", mode="fused", compile_s=0.1,
                   mlups={"median": rec["effective_gbs"] * 1e3 / 72, "spread_pct": 1.0})
    assert above["fraction_of_roofline"] == pytest.approx(50.4 / 45.0) and above["roofline_check"] == ABOVE_ROOFLINE
    (line,) = roofline_warnings([above, cached])
    assert line.startswith("periodic 4096x4096 d2q9 bgk native float32: 112.0 % of the roofline") and "probe is wrong" in line
    bandwidth = {"kernels": ["copy", "native_copy"], "repeats": 3, "bandwidth_gbs": 45.0, "roofline_kernel": "native_copy",
                 "cache_bytes": 32 * 2**20, "copy": {"median_gbs": 40.0, "cache_resident": False},
                 "native_copy": {"median_gbs": 45.0, "cache_resident": False},
                 "spec_bandwidth_gbs": 60.0, "spec_source": "a datasheet", "fraction_of_spec": 0.75}
    print_table({"bandwidth": bandwidth, "records": [above, cached], "roofline_warnings": [line]})
    out = capsys.readouterr().out
    assert "112.0 % (above: probe wrong)" in out and "cache-resident" in out
    assert "copy 40.0, native_copy 45.0" in out and "last-level cache 32.0 MiB" in out
    assert "specification 60 GB/s (a datasheet): the roofline is 75 % of it" in out
    assert " ".join(f"WARNING {line}".split()) in " ".join(out.split())  # rich wraps long lines


def test_a_record_above_the_roofline_that_fits_in_a_tpus_vmem_is_marked_on_chip_not_a_wrong_probe(capsys):
    """On a TPU v5e (its VMEM, 128 MiB, from lbm/targets/v5e.yaml) the push rows kernel read 109.8 % of the probe at
    D2Q9 1024 x 1100 (39 MiB; docs/tpu-v5e/2026-12-07/push-pair/): part of its traffic stays on chip, which the HBM
    probe cannot bound. Such a record keeps its fraction but is marked ``on_chip``, not a wrong probe; a working set
    larger than the VMEM above the roofline still is."""
    from lbm.bench.report import print_table
    from lbm.bench.throughput import ABOVE_ROOFLINE, ON_CHIP, apply_roofline, roofline_warnings
    from lbm.roofline import on_chip_memory

    vmem, source = on_chip_memory("TPU v5 lite")
    assert vmem == 128 * 2**20 and "VMEM" in source
    assert on_chip_memory("NVIDIA H100 80GB HBM3") is None and on_chip_memory("") is None
    small = _record((1024, 1100), 10087.0, planned=9 * 4 * 1024 * 1100)  # 726 GB/s over a 661 GB/s probe
    large = _record((4096, 4096), 10087.0)  # the same speed at 576 MiB: the probe is wrong
    for rec in (small, large):
        apply_roofline(rec, 661.0, cache_bytes=None, on_chip_bytes=vmem)
        rec.update(engine="pallas", mode="fused", compile_s=0.1,
                   mlups={"median": rec["effective_gbs"] * 1e3 / 72, "spread_pct": 0.0})
    assert small["roofline_check"] == ON_CHIP and small["on_chip"] is True
    assert small["fraction_of_roofline"] == pytest.approx(726.264 / 661.0)  # the fraction stays, named as what it is
    assert large["roofline_check"] == ABOVE_ROOFLINE and "on_chip" not in large
    assert [w.split(":")[0] for w in roofline_warnings([small, large])] == ["periodic 4096x4096 d2q9 bgk native float32"]
    bandwidth = {"kernels": ["copy"], "repeats": 3, "bandwidth_gbs": 661.0, "roofline_kernel": "copy",
                 "cache_bytes": None, "copy": {"median_gbs": 661.0, "cache_resident": None},
                 "on_chip_bytes": vmem, "on_chip_source": source}
    print_table({"bandwidth": bandwidth, "records": [small, large], "roofline_warnings": []})
    out = " ".join(capsys.readouterr().out.split())
    assert "109.9 % (above: fits on chip)" in out and "109.9 % (above: probe wrong)" in out
    assert "on-chip memory 128 MiB" in out


@pytest.mark.parametrize("steps", [None, 4])
def test_a_fused_measurement_holds_the_populations_once(monkeypatch, steps):
    """Every run of a fused measurement (the steps probe, warm-up, repeats, the kernel profile) holds one population
    array on the device: the initial populations are handed to the run (donated), not kept beside a copy (D3Q19
    512^3, 10.2 GB, on a 16 GiB TPU: twice that ran out of memory)."""
    import jax

    from lbm.bench import throughput

    cfg = throughput.BenchConfig("periodic", "d2q9", (32, 24), "xla")
    timing = throughput.Timing(repeats=2, warmup=1, steps=steps, min_time_s=0.001, max_steps=4, kernel_profile=2)
    shape = (9, 32, 24)
    held = []
    run = throughput._FusedRunner.run

    def counted(self, f, n):
        held.append(sum(a.shape == shape for a in jax.live_arrays()))
        return run(self, f, n)

    monkeypatch.setattr(throughput._FusedRunner, "run", counted)
    rec = throughput.measure(cfg, timing, None)
    assert rec["steps_per_repeat"] == 4 and len(held) >= 4
    assert max(held) == 1, held
    assert rec["memory"]["population_bytes"] == 9 * 32 * 24 * 4


def test_a_float64_bench_puts_the_float64_switch_back(tmp_path):
    """bench measures a float64 configuration with JAX's float64 switch on, and leaves it as it found it."""
    from lbm.environment import float64_enabled

    assert not float64_enabled()
    run_dir = tmp_path / "run"
    assert main(["bench", "cases=[periodic]", "variants=[xla]", "grid.nx=8", "grid.ny=8", "repeats=1", "steps=2",
                 "precision=float64", "kernel_profile=0", "bandwidth.enabled=false", f"hydra.run.dir={run_dir}"]) == 0
    (record,) = json.loads((run_dir / "bench.json").read_text())["records"]
    assert record["precision"] == "float64" and record["mlups"]["median"] > 0
    assert not float64_enabled()


def test_bench_says_whether_auto_picked_the_fastest_engine_measured_beside_it(capsys):
    """Issue 38: auto must never pick an engine more than 10 % slower than another; a bench run with auto and the
    engines beside it says which it picked and how it stands (bench.json's summary, and one line each)."""
    from lbm.bench.report import auto_lines, print_table, summary

    def rec(variant: str, engine: str, mlups: float, grid=(420, 180)) -> dict:
        return {"case": "cylinder", "lattice": "d2q9", "grid": list(grid), "precision": "float32", "collision": "bgk",
                "variant": variant, "engine": engine, "compile_s": 1.0, "effective_gbs": mlups * 0.072,
                "mlups": {"median": mlups, "spread_pct": 0.5}}

    right = [rec("auto", "xla", 2239.1), rec("pallas", "pallas", 297.6), rec("xla", "xla", 2235.9)]
    close = [rec("auto", "xla", 900.0, (64, 64)), rec("pallas", "pallas", 960.0, (64, 64))]
    wrong = [rec("auto", "pallas", 297.6, (128, 128)), rec("xla", "xla", 2235.9, (128, 128))]
    alone = [rec("auto", "native", 100.0, (32, 32)), rec("native", "native", 99.0, (32, 32))]
    # auto's engine not named beside it, and faster than the one that is (CPU: native against xla)
    unnamed = [rec("auto", "native", 148.0, (16, 16)), rec("xla", "xla", 26.2, (16, 16))]
    rows = summary(right + close + wrong + alone + unnamed, None)
    checks = {tuple(r["grid"]): r.get("auto_check") for r in rows}
    assert checks[(420, 180)]["picked"] == checks[(420, 180)]["fastest"] == "xla" and checks[(420, 180)]["ok"]
    assert checks[(64, 64)]["fastest"] == "pallas" and checks[(64, 64)]["fastest_over_auto"] == pytest.approx(960 / 900 - 1)
    assert checks[(64, 64)]["ok"] and not checks[(128, 128)]["ok"]
    assert checks[(32, 32)] is None  # auto's own engine alone beside it: nothing to judge
    assert checks[(16, 16)]["fastest"] == "native" and checks[(16, 16)]["ok"]
    lines = auto_lines(rows)
    assert lines[0] == ("auto picked xla for cylinder 420x180 d2q9 bgk float32: the fastest engine measured "
                        "(MLUPS: auto 2239, pallas 298, xla 2236)")
    assert "pallas was 6.7 % faster, within the 10 % auto allows" in lines[1]
    assert "WRONG: xla was 651.3 % faster, more than the 10 % auto allows" in lines[2] and len(lines) == 4
    assert lines[3] == ("auto picked native for cylinder 16x16 d2q9 bgk float32: the fastest engine measured "
                        "(MLUPS: auto 148, xla 26)")
    print_table({"records": right, "summary": rows})
    assert "auto picked xla for cylinder 420x180" in " ".join(capsys.readouterr().out.split())

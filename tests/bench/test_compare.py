"""python -m lbm compare: structure first, then interleaved timing; two files alone never make a timing REGRESSION."""

import copy
import json
import math
import os
import subprocess
import sys

import pytest

from lbm.cli import main
from lbm.errors import LbmError

KERNELS = [{"name": "fusion.1", "kind": "kLoop", "stages": ["macroscopic", "equilibrium", "collide"],
            "bytes_per_cell_step": 72.0},
           {"name": "fusion.2", "kind": "kLoop", "stages": ["stream"], "bytes_per_cell_step": 72.0}]


def evidence(kernels=None, flops=200.0, targets=()):
    kernels = copy.deepcopy(KERNELS if kernels is None else kernels)
    return {"chunk_steps": 16, "steps_per_loop_body": 2, "kernels_per_step": float(len(kernels)),
            "bytes_per_cell_step": sum(k["bytes_per_cell_step"] for k in kernels),
            "cost_bytes_per_cell_step": 150.0, "cost_flops_per_cell_step": flops,
            "custom_call_targets": list(targets), "kernels": kernels}


def bench_doc(values, jax_version="0.12.0.1", ev=None, xla_flags="", stages=None, load=(1.0, 1.0, 1.0)):
    med = sorted(values)[len(values) // 2]
    rec = {"case": "periodic", "lattice": "d2q9", "grid": [256, 256], "variant": "xla", "precision": "float32",
           "collision": "bgk", "engine": "xla", "steps_per_repeat": 64, "steps_per_dispatch": 64,
           "mlups": {"median": med, "min": min(values), "max": max(values), "values": list(values)},
           "evidence": evidence() if ev is None else ev, "compile_s": 0.5}
    if stages:
        rec["stages"] = stages
    return {"environment": {"jax": jax_version, "XLA_FLAGS": xla_flags, "cpu_count": 2}, "bandwidth": {"bandwidth_gbs": 40.0},
            "load_average_start": list(load), "load_average_end": list(load), "records": [rec]}


def write(tmp_path, name, doc):
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


def verdict_of(capsys):
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("**Verdict: "))
    return out, line.split("**")[1].removeprefix("Verdict: ")


def run_compare(tmp_path, a, b, *extra):
    return main(["compare", write(tmp_path, "a.json", a), write(tmp_path, "b.json", b), *extra])


def test_identical_runs_are_ok_and_the_report_shows_load_spread_and_threshold(tmp_path, capsys):
    a = bench_doc([100, 101, 99, 100.5, 99.5], load=(1.5, 1.2, 1.1))
    b = bench_doc([100, 101, 99, 100.5, 99.5], load=(6.2, 5.0, 3.0))
    assert run_compare(tmp_path, a, b) == 0
    out, word = verdict_of(capsys)
    assert word == "OK" and "| identical |" in out
    assert "base [1.5, 1.2, 1.1] -> [1.5, 1.2, 1.1], new [6.2, 5.0, 3.0] -> [6.2, 5.0, 3.0], on 2 cores" in out
    assert "Threshold applied: 10%" in out
    assert "| 101.0 (100.0), 2% | 101.0 (100.0), 2% |" in out  # fastest (median), repeat spread of both


def test_a_busy_machine_slowing_most_repeats_is_not_a_regression(tmp_path, capsys):
    """Contention only slows repeats down: the fastest repeat survives it, the median does not."""
    a = bench_doc([100, 99, 101, 100, 98])
    b = bench_doc([99, 60, 62, 58, 61])  # median -39%, fastest -2%
    assert run_compare(tmp_path, a, b) == 0
    out, word = verdict_of(capsys)
    assert word == "OK" and "| -2.0% (-39.0%) |" in out


def test_identical_programs_slower_in_two_files_are_inconclusive_not_a_regression(tmp_path, capsys):
    """Two files measured at different moments, same compiled program: a slowdown is the machine or is unknown."""
    a, b = bench_doc([100, 100.5, 99.5, 100, 100]), bench_doc([70, 70.5, 69.5, 70, 70])  # -30%, p = 0.008
    assert run_compare(tmp_path, a, b) == 3
    out, word = verdict_of(capsys)
    assert word == "INCONCLUSIVE" and "identical programs" in out
    assert "--remeasure 20" in out and "--base-python" in out and "quieter machine" in out


def test_fusion_disabled_is_a_structural_regression_at_any_timing(tmp_path, capsys):
    """More kernels and bytes per cell and step: REGRESSION from the structure, whatever the repeats say, naming
    the flag and the kernels that appeared."""
    unfused = [{"name": f"wrapped_multiply.{i}", "kind": "kLoop", "stages": ["collide"],
                "bytes_per_cell_step": 54.0} for i in range(6)] + copy.deepcopy(KERNELS[1:])
    a = bench_doc([100, 60, 62, 98, 61])
    b = bench_doc([140, 61, 63, 60, 90], ev=evidence(unfused, flops=120.0),  # faster and noisier: still caught
                  xla_flags="--xla_disable_hlo_passes=fusion")
    assert run_compare(tmp_path, a, b) == 1
    out, word = verdict_of(capsys)
    assert word == "REGRESSION"
    basis = next(ln for ln in out.splitlines() if ln.startswith("- structural"))
    assert "kernels per step 2 -> 7 (+250.0%)" in basis and "--xla_disable_hlo_passes=fusion" in basis
    assert "`wrapped_multiply.0` (kLoop: collide)" in basis and "`fusion.1` (kLoop: macroscopic+equilibrium+collide)" in basis
    assert "| flops per cell and step (XLA cost analysis) | 200 | 120 | -40.0% |" in out  # fewer flops, more bytes


def test_more_flops_per_cell_is_a_regression_from_the_evidence(tmp_path, capsys):
    a, b = bench_doc([100, 101, 99]), bench_doc([100, 101, 99], ev=evidence(flops=250.0))  # +25%, same timing
    assert run_compare(tmp_path, a, b) == 1
    out, word = verdict_of(capsys)
    assert word == "REGRESSION" and "flops per cell and step 200 -> 250 (+25.0%)" in out
    # below the threshold, a change of the program alone is no verdict: the (quiet, equal) timing decides
    assert run_compare(tmp_path, a, b, "--threshold", "0.3") == 0
    assert verdict_of(capsys)[1] == "OK"


def test_another_program_slower_in_two_files_is_inconclusive(tmp_path, capsys):
    """A native kernel's source changed (its custom-call target): only timing can tell, and two files cannot."""
    a = bench_doc([100, 100.5, 99.5, 100, 100], ev=evidence(targets=["lbm_d2q9_aaaa_aa_even"]))
    b = bench_doc([75, 75.5, 74.5, 75, 75], ev=evidence(targets=["lbm_d2q9_bbbb_aa_even"]))
    assert run_compare(tmp_path, a, b) == 3
    out, word = verdict_of(capsys)
    assert word == "INCONCLUSIVE" and "| changed |" in out
    assert "['lbm_d2q9_aaaa_aa_even'] -> ['lbm_d2q9_bbbb_aa_even']" in out
    quiet = bench_doc([99.5, 100, 99.8, 100.2, 99.9], ev=evidence(targets=["lbm_d2q9_bbbb_aa_even"]))
    assert run_compare(tmp_path, a, quiet) == 0  # within a noise below the threshold, on a quiet machine: OK
    busy = copy.deepcopy(quiet)
    busy["load_average_end"] = [6.0, 5.0, 4.0]  # 3x the cores: a run's speed moves between moments
    capsys.readouterr()
    assert run_compare(tmp_path, a, busy) == 3
    assert "at a load average of up to 6.0 on 2 cores" in capsys.readouterr().out
    noisy_a = bench_doc([100, 80, 81, 79, 80], ev=evidence(targets=["lbm_d2q9_aaaa_aa_even"]))
    noisy_b = bench_doc([99, 80, 78, 79, 81], ev=evidence(targets=["lbm_d2q9_bbbb_aa_even"]))
    capsys.readouterr()
    assert run_compare(tmp_path, noisy_a, noisy_b) == 3  # noise ±20% > threshold: a 10% slowdown could hide
    assert "the noise exceeds the threshold" in capsys.readouterr().out


def test_less_work_is_ok_and_records_without_evidence_are_judged_by_timing(tmp_path, capsys):
    a = bench_doc([100, 101, 99], ev=evidence(flops=300.0))
    assert run_compare(tmp_path, a, bench_doc([100, 101, 99])) == 0
    assert "| less work |" in capsys.readouterr().out
    old = bench_doc([100, 101, 99])
    del old["records"][0]["evidence"]
    assert run_compare(tmp_path, old, bench_doc([60, 61, 59])) == 3
    assert "no structural evidence in the base record" in capsys.readouterr().out


def test_a_peer_record_is_named_as_the_peer_not_as_an_older_lbm(tmp_path, capsys):
    docs = []
    for values in ([100, 101, 99], [60, 61, 59]):
        doc = bench_doc(values)
        rec = doc["records"][0]
        del rec["evidence"]
        rec.update(variant="lbmpy", mode="peer", peer={"peer": "lbmpy", "lbmpy": "2.1"})
        docs.append(doc)
    assert run_compare(tmp_path, *docs) == 3  # two files, no program to compare: never a REGRESSION from timing
    out = capsys.readouterr().out
    assert "a same-run peer's kernel (lbmpy 2.1) has no compiled program to compare" in out
    assert "older lbm" not in out


def test_threshold_and_p_value_of_the_two_file_timing(tmp_path, capsys):
    from lbm.bench.compare import min_p, permutation_p

    a = bench_doc([100, 60, 62, 98, 61])
    b = bench_doc([85, 84, 61, 63, 60])  # fastest -15%, but the repeats overlap: p = 210/252
    assert run_compare(tmp_path, a, b) == 3
    out = capsys.readouterr().out
    assert "| 0.833 |" in out and "±10.0%" in out
    assert permutation_p([1, 2, 3], [4, 5, 6]) == pytest.approx(0.1)
    assert permutation_p([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) == pytest.approx(2 / 252)
    assert min_p(3, 3) == pytest.approx(0.1) and min_p(5, 5) == pytest.approx(2 / 252)
    assert run_compare(tmp_path, a, b, "--threshold", "0.2") == 0
    assert "Threshold applied: 20%" in capsys.readouterr().out


def test_median_interval_is_the_order_statistics_interval():
    from lbm.bench.interleave import median_interval, rounds_needed

    xs = [float(i) for i in range(1, 13)]
    assert median_interval(xs) == (3.0, 10.0)  # n = 12: k = 3, coverage 1 - 2 * 79 / 4096 = 0.961
    assert median_interval([1.0, 2.0, 3.0, 4.0, 5.0]) == (-math.inf, math.inf)  # coverage 0.94 < 0.95
    assert median_interval([float(i) for i in range(6)]) == (0.0, 5.0) and rounds_needed() == 6


def test_a_speed_of_its_own_per_process_is_not_taken_for_a_regression(monkeypatch):
    """Identical code in two worker processes can run at different speeds for the processes' whole life (measured:
    docs/studies.md). Fake workers with such an offset (log-normal) and 2% noise per round: spread over fresh
    pairs of workers, 20 rounds call identical code a REGRESSION at most at the interval's own rate (2.5%) with a
    15% offset, where one pair of workers for all 20 (as before) does so often; with a 5% offset a real +25% is
    a REGRESSION every time."""
    import random

    from lbm.bench import interleave
    from lbm.bench.interleave import measure, rounds_per_pair, verdict_of_rounds

    assert rounds_per_pair(20) == [4, 4, 3, 3, 3, 3] and rounds_per_pair(6) == [1] * 6 and rounds_per_pair(2) == [1, 1]
    rng = random.Random(7)
    slower = {"value": 1.0, "offset": 0.15}

    def start(self, configs, cwd):
        self.speed = math.exp(rng.gauss(0.0, slower["offset"])) * (slower["value"] if self.python == "new" else 1.0)
        self.n = len(configs)

    def answer(self):
        return {"ready": True, "evidence": [None] * self.n}

    def time_one(self, i):
        t = self.speed * math.exp(rng.gauss(0.0, 0.02))
        self.cpu_s.setdefault(i, []).append(t)
        self.wall_s.setdefault(i, []).append(t)

    monkeypatch.setattr(interleave.Side, "start", start)
    monkeypatch.setattr(interleave.Side, "answer", answer)
    monkeypatch.setattr(interleave.Side, "time_one", time_one)
    monkeypatch.setattr(interleave.Side, "stop", lambda self: None)
    monkeypatch.setattr(interleave.sys, "executable", "new")
    rec = {"case": "periodic", "lattice": "d2q9", "grid": [16, 16], "variant": "xla", "precision": "float32"}

    def regressions(factor, offset, trials=40):
        slower.update(value=factor, offset=offset)
        got = [verdict_of_rounds(measure([(rec, rec)], "", "", 20, "base", threshold=0.1)[0].log_ratios, 0.1)
               for _ in range(trials)]
        return got.count("REGRESSION")

    assert regressions(1.0, 0.15) <= 2 and regressions(1.25, 0.05) == 40

    def one_pair():  # the 20 rounds of one pair of such workers as 20 observations: the process's own speed decides
        base, new = (math.exp(rng.gauss(0.0, 0.15)) for _ in range(2))
        return [math.log(new / base) + rng.gauss(0.0, 0.03) for _ in range(20)]

    assert [verdict_of_rounds(one_pair(), 0.1) for _ in range(40)].count("REGRESSION") >= 8


def test_rounds_stop_early_only_where_the_rest_cannot_change_the_verdict():
    """``settled``: after each round, the verdict of all planned rounds is fixed or not; where it is, stopping gives
    exactly the verdict the planned rounds give (random sequences: clear, noisy, and no change)."""
    import random

    from lbm.bench.interleave import settled, verdict_of_rounds

    rng = random.Random(1)
    stops = {"REGRESSION": [], "OK": [], "INCONCLUSIVE": []}
    for trial in range(300):
        centre, noise = rng.choice([(0.22, 0.05), (0.0, 0.02), (0.0, 0.3), (0.1, 0.1)])
        planned = rng.choice([6, 12, 20])
        logs = [rng.gauss(centre, noise) for _ in range(planned)]
        final = verdict_of_rounds(logs, 0.1)
        m = next(m for m in range(1, planned + 1) if settled(logs[:m], planned, 0.1))
        assert verdict_of_rounds(logs[:m] + [50.0] * (planned - m), 0.1) == final, (trial, m)
        assert verdict_of_rounds(logs[:m], 0.1) == final, (trial, m)  # what the report judges: the rounds run
        stops[final].append(m / planned)
    assert all(stops.values()) and min(stops["INCONCLUSIVE"]) < 0.7  # a noisy INCONCLUSIVE stops well before the end
    assert not settled([0.3] * 5, 12, 0.1) and settled([0.3] * 10, 12, 0.1)  # clear: 10 of 12 rounds fix it


def fake_rounds(ratios, mismatch=()):
    from lbm.bench.interleave import Interleaved

    return Interleaved(len(ratios), [math.log(r) for r in ratios], statistics_median(ratios), ([2.0] * 3, [2.5] * 3),
                       list(mismatch))


def statistics_median(xs):
    import statistics

    return statistics.median(xs)


@pytest.mark.parametrize("ratios,exit_code,word", [
    ([1.25, 1.3, 1.22, 1.28, 1.24, 1.26, 1.31, 1.2, 1.27, 1.25, 1.23, 1.29], 1, "REGRESSION"),
    ([1.0, 1.02, 0.98, 1.01, 0.99, 1.0, 1.03, 0.97, 1.0, 1.01, 0.99, 1.0], 0, "OK"),
    ([1.0, 1.4, 0.7, 1.3, 0.8, 1.2, 1.5, 0.9, 1.1, 1.25, 0.75, 1.05], 3, "INCONCLUSIVE"),
    ([1.3, 1.3, 1.3, 1.3, 1.3], 3, "INCONCLUSIVE"),  # too few rounds for a 95% interval, median above threshold
    ([1.02, 0.98], 0, "OK"),  # too few rounds to decide: the two files' OK stands (the issue's --remeasure 2)
])
def test_interleaved_rounds_decide_the_timing_verdict(tmp_path, monkeypatch, capsys, ratios, exit_code, word):
    """--remeasure: the paired rounds' median slowdown and its 95% interval decide (the measuring is faked here)."""
    from lbm.bench import compare as cmp

    calls = []

    def fake(pairs, base_flags, new_flags, rounds, base_python, say=None, threshold=None):
        calls.append((len(pairs), base_flags, new_flags, rounds, base_python, threshold))
        return [fake_rounds(ratios)]

    monkeypatch.setattr(cmp, "measure_interleaved", fake)
    a = bench_doc([100, 101, 99], ev=evidence(targets=["lbm_a"]))
    b = bench_doc([100, 101, 99], ev=evidence(targets=["lbm_b"]), xla_flags="--flag")
    assert run_compare(tmp_path, a, b, "--remeasure", str(len(ratios))) == exit_code
    out, got = verdict_of(capsys)
    assert got == word and calls == [(1, "", "--flag", len(ratios), None, 0.1)]
    assert f"on {len(ratios)} pairs of workers" in out and "load [2.0, 2.0, 2.0] -> [2.5, 2.5, 2.5]" in out
    assert ("no 95% interval: 6 pairs of workers needed" in out) == (len(ratios) < 6)
    assert "nan" not in out and "inf" not in out


def test_interleaved_rounds_of_another_program_decide_nothing(tmp_path, monkeypatch, capsys):
    from lbm.bench import compare as cmp

    monkeypatch.setattr(cmp, "measure_interleaved", lambda *a, **k: [fake_rounds(
        [1.3] * 12, ["the base side (python, XLA_FLAGS='') compiles another program than the base file records"])])
    a, b = bench_doc([100, 101, 99], ev=evidence(targets=["lbm_a"])), bench_doc([70, 71, 69], ev=evidence(targets=["lbm_b"]))
    assert run_compare(tmp_path, a, b, "--remeasure", "12") == 3
    out = capsys.readouterr().out
    assert "give --base-python with the base's environment" in out and "side mismatch" in out


def test_structural_regressions_are_not_remeasured(tmp_path, monkeypatch):
    from lbm.bench import compare as cmp

    monkeypatch.setattr(cmp, "measure_interleaved", lambda *a, **k: pytest.fail("re-measured a structural verdict"))
    assert run_compare(tmp_path, bench_doc([100, 101, 99]), bench_doc([100, 101, 99], ev=evidence(flops=400.0)),
                       "--remeasure", "6") == 1


def test_a_clear_slowdown_shows_its_stages_and_environment(tmp_path, capsys):
    a = bench_doc([100, 101, 99, 100.5, 99.5], stages={"stream": {"median_ms": 1.0}, "collide": {"median_ms": 2.0}})
    b = bench_doc([70, 71, 69, 70.5, 69.5], jax_version="0.10.2", ev=evidence(targets=["x"]),
                  stages={"stream": {"median_ms": 1.0}, "collide": {"median_ms": 3.1}})
    out_md = tmp_path / "report.md"
    assert run_compare(tmp_path, a, b, "--out", str(out_md)) == 3
    text = capsys.readouterr().out
    assert "| -29.7% (-30.0%) |" in text and "| jax | 0.12.0.1 | 0.10.2 |" in text
    assert "| collide | 2.000 | 3.100 | +55.0% |" in text
    assert out_md.read_text().strip() == text.strip()


def with_cpu(doc, cpu_values, clock="process CPU time"):
    doc = copy.deepcopy(doc)
    doc["records"][0]["mlups"]["cpu_values"] = list(cpu_values)
    doc["records"][0]["clock"] = clock
    return doc


def test_cpu_time_repeats_decide_where_both_files_have_them(tmp_path, capsys):
    a = with_cpu(bench_doc([100, 101, 99, 100.5, 99.5]), [50, 50.5, 49.5, 50, 50])
    busy = with_cpu(bench_doc([60, 61, 59, 60.5, 59.5]), [50.2, 49.8, 50, 49.9, 50.1])
    assert run_compare(tmp_path, a, busy) == 0
    assert "| 50.5 (50.0) (CPU time), 2% | 50.2 (50.0) (CPU time), 1% | -0.6% (+0.0%) |" in capsys.readouterr().out
    assert run_compare(tmp_path, bench_doc([100, 101, 99, 100.5, 99.5]), bench_doc([60, 61, 59, 60.5, 59.5])) == 3


def test_records_timed_with_different_clocks_are_not_compared(tmp_path, capsys):
    a = with_cpu(bench_doc([100, 101, 99]), [50, 50, 50], clock="host wall clock")
    b = with_cpu(bench_doc([100, 101, 99]), [50, 50, 50], clock="process CPU time")
    assert run_compare(tmp_path, a, b) == 2
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert err.startswith("lbm: error: ") and "different clocks" in err


@pytest.mark.parametrize("content", ["", "{not json", json.dumps({"records": []}), json.dumps([1, 2])])
def test_bad_input_exits_2(tmp_path, content, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    good = write(tmp_path, "good.json", bench_doc([1, 2, 3]))
    assert main(["compare", str(bad), good]) == 2
    assert main(["compare", good, str(tmp_path / "missing.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(e.startswith("lbm: error: ") for e in err)


def test_configurations_only_in_one_file_are_listed(tmp_path, capsys):
    a = bench_doc([100, 100, 100])
    b = copy.deepcopy(a)
    b["records"][0]["grid"] = [512, 512]
    assert run_compare(tmp_path, a, b) == 0
    assert "Not compared" in capsys.readouterr().out


@pytest.mark.parametrize("extra", [["--base-python", sys.executable], ["--remeasure", "1", "--base-python", "/no/python"],
                                   ["--remeasure", "-1"], ["--threshold", "2"]])
def test_options_are_checked(tmp_path, extra, capsys):
    doc = write(tmp_path, "a.json", bench_doc([100, 99, 98]))
    assert main(["compare", doc, doc, *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("lbm: error: --")


@pytest.mark.parametrize("command", ["compare", "bench"])
def test_help_prints_options_without_jax(command):
    """``--help`` answers from the argument parser or the config file: with ``import jax`` failing it still works."""
    code = ("import sys; sys.modules['jax'] = None; from lbm.cli import main; "
            f"sys.exit(main([{command!r}, '--help']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    if command == "compare":
        assert "--remeasure N" in proc.stdout and "3  INCONCLUSIVE" in proc.stdout and "--base-python" in proc.stdout
    else:
        assert "min_time_s:" in proc.stdout and "variants:" in proc.stdout and "usage: python -m lbm bench" in proc.stdout


SUITE_XLA_FLAGS = os.environ.get("XLA_FLAGS", "")
"""The suite's XLA flags (tests/conftest.py: no LLVM optimisation): the same HLO, so the same evidence, and cheaper
compiles for the real benches and workers below, which judge programs, not speed."""


def run_bench(tmp_path, name, xla_flags):
    env = {**os.environ, "XLA_FLAGS": xla_flags}
    proc = subprocess.run([sys.executable, "-m", "lbm", "bench", "cases=[cylinder]", "variants=[xla]",
                           "cylinder_grid.nx=48", "cylinder_grid.ny=24", "repeats=3", "min_time_s=0.02",
                           "bandwidth.enabled=false", "kernel_profile=0", f"hydra.run.dir={tmp_path / name}"],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr
    return str(tmp_path / name / "bench.json")


@pytest.fixture(scope="module")
def base_bench(tmp_path_factory):
    """One real bench.json (the cylinder on the xla engine), shared by the tests of the group "real_bench"."""
    return run_bench(tmp_path_factory.mktemp("real_bench"), "base", SUITE_XLA_FLAGS)


@pytest.mark.slow
@pytest.mark.xdist_group("real_bench")
def test_real_benches_identical_code_same_evidence_and_fusion_disabled_caught(tmp_path, capsys, base_bench):
    """Two benches of the same code compile the same programs; without XLA's fusion pass the structure alone calls
    a REGRESSION and names the flag (the repeats' timing cannot change either verdict)."""
    from lbm.bench.evidence import diff

    base, again = base_bench, run_bench(tmp_path, "again", SUITE_XLA_FLAGS)
    unfused = run_bench(tmp_path, "unfused", f"{SUITE_XLA_FLAGS} --xla_disable_hlo_passes=fusion")
    docs = {p: json.loads(open(p).read()) for p in (base, again, unfused)}
    assert diff(docs[base]["records"][0]["evidence"], docs[again]["records"][0]["evidence"], 0.1).kind == "identical"
    same_timing = copy.deepcopy(docs[again])
    same_timing["records"][0]["mlups"] = docs[base]["records"][0]["mlups"]  # the timing fixed: the verdict is exact
    assert main(["compare", base, write(tmp_path, "again_fixed.json", same_timing)]) == 0
    assert "| identical |" in capsys.readouterr().out
    assert main(["compare", base, unfused]) == 1
    out = capsys.readouterr().out
    assert "| more work |" in out
    assert f"XLA_FLAGS '{SUITE_XLA_FLAGS}' -> '{SUITE_XLA_FLAGS} --xla_disable_hlo_passes=fusion'" in out


@pytest.mark.slow
@pytest.mark.xdist_group("real_bench")
def test_interleaved_workers_time_both_sides_and_check_their_programs(base_bench):
    """Real workers, one per side for every configuration: one timed repeat per side and round, each round on a
    fresh pair (two rounds: two pairs); a file whose program differs from what the worker compiles is named as a
    mismatch."""
    from lbm.bench.interleave import measure, rounds_per_pair

    doc = json.loads(open(base_bench).read())
    rec = doc["records"][0]
    other = copy.deepcopy(rec)
    other["evidence"]["custom_call_targets"] = ["lbm_some_other_kernel"]
    # the first configuration's base file claims another program than its worker compiles; the second is honest
    assert rounds_per_pair(2) == [1, 1]
    claimed, honest = measure([(other, rec), (rec, rec)], SUITE_XLA_FLAGS, SUITE_XLA_FLAGS, 2, None)
    for got in (claimed, honest):
        assert got.rounds == 2 and len(got.log_ratios) == 2 and all(math.isfinite(x) for x in got.log_ratios)
        assert got.load[0] is not None
    assert len(claimed.mismatch) == 1 and claimed.mismatch[0].startswith("the base side") and not honest.mismatch
    with pytest.raises(LbmError, match="stopped"):
        measure([(rec, rec)], SUITE_XLA_FLAGS, SUITE_XLA_FLAGS, 1, base_bench)  # not an interpreter: the worker fails


def instrumented_evidence(setup):
    from lbm.bench.evidence import stages_evidence
    from lbm.engines.instrumented import InstrumentedEngine

    return stages_evidence(InstrumentedEngine(setup).describe(), math.prod(setup.shape))


def test_a_base_python_with_an_older_worker_is_named(tmp_path):
    """--base-python of a checkout whose worker takes one configuration (before one worker per side): one clear
    error naming what the base lacks (the worker's own error, then the hint)."""
    from lbm.bench.interleave import measure

    old = tmp_path / "old-python"
    old.write_text("#!/bin/sh\necho \"TypeError: list indices must be integers or slices, not str\" >&2\nexit 1\n")
    old.chmod(0o755)
    rec = {"case": "periodic", "lattice": "d2q9", "grid": [16, 16], "variant": "xla", "precision": "float32",
           "steps_per_repeat": 2}
    with pytest.raises(LbmError, match="needs a base with this compare"):
        measure([(rec, rec)], "", "", 6, str(old))


def per_stage(collide_flops):
    stages = {"macroscopic": (4, 156.0, 33.0), "collide": (7, 348.0, collide_flops), "stream": (28, 432.0, None)}
    ev = evidence(flops=33.0 + collide_flops)
    ev["stages"] = {s: {"kernels_per_step": k, "bytes_per_cell_step": b, "cost_bytes_per_cell_step": b,
                        "cost_flops_per_cell_step": f} for s, (k, b, f) in stages.items()}
    return ev


def test_per_stage_evidence_names_the_stage_whose_work_grew(tmp_path, capsys):
    """The fast lane's representative of instrumented evidence: the stage whose measures moved is named."""
    a, b = bench_doc([100, 101, 99], ev=per_stage(27.0)), bench_doc([100, 101, 99], ev=per_stage(60.0))
    assert run_compare(tmp_path, a, b) == 1
    out, word = verdict_of(capsys)
    assert word == "REGRESSION" and "in stage(s) collide" in out
    assert "| collide: flops per cell and step | 27 | 60 | +122.2% |" in out and "| stream:" not in out


@pytest.mark.slow  # compiles every stage three times (about 4 s)
def test_instrumented_evidence_is_per_stage_and_names_the_stage_that_changed(monkeypatch, capsys, tmp_path):
    """Instrumented mode (one executable per stage): the step's evidence is the stages' evidence summed, identical for
    identical code; extra arithmetic in collide is a structural REGRESSION whose new kernels name ``collide``."""
    from lbm.bench.evidence import WORK_FIELDS, diff
    from lbm.bench.throughput import BenchConfig, make_setup
    from lbm.engines import timestep

    setup = make_setup(BenchConfig("periodic", "d2q9", (16, 12), "instrumented"))
    ev = instrumented_evidence(setup)
    assert set(ev["stages"]) == set(setup.stages) and ev["kernels_per_step"] == len(ev["kernels"]) > len(setup.stages)
    for f in WORK_FIELDS:
        assert ev[f] == pytest.approx(sum(s[f] or 0.0 for s in ev["stages"].values()), rel=1e-12)
    assert ev["bytes_per_cell_step"] == pytest.approx(sum(k["bytes_per_cell_step"] for k in ev["kernels"]))
    assert all(k["stages"] == [k["name"].split("/")[0]] for k in ev["kernels"])
    assert diff(ev, instrumented_evidence(setup), 0.1).kind == "identical"  # compiled again: the same evidence

    core = timestep.CORE["collide"]

    def heavier(s, setup):  # 40 more multiplications per population (scripts/compare_study_site's xla injection)
        s = core(s, setup)
        extra = s.post
        for _ in range(40):
            extra = extra * 1.0001
        post = s.post + 0.0 * extra
        return s.replace(collided=post, post=post)

    monkeypatch.setitem(timestep.CORE, "collide", heavier)
    slow = instrumented_evidence(setup)
    assert slow["stages"]["collide"]["cost_flops_per_cell_step"] > 1.5 * ev["stages"]["collide"]["cost_flops_per_cell_step"]
    assert {s: v for s, v in slow["stages"].items() if s != "collide"} == {
        s: v for s, v in ev["stages"].items() if s != "collide"}
    a, b = bench_doc([100, 101, 99], ev=ev), bench_doc([100, 101, 99], ev=slow)
    for doc in (a, b):
        doc["records"][0].update(variant="instrumented", engine="per-stage jit")
    assert run_compare(tmp_path, a, b) == 1
    out, word = verdict_of(capsys)
    assert word == "REGRESSION" and "| more work |" in out and "in stage(s) collide" in out
    assert "| collide: flops per cell and step |" in out and "| stream:" not in out


def two_configurations(second_values, second_ev=None):
    """A bench.json with the D2Q9 record of ``bench_doc`` and a D3Q19 one with its own repeats and evidence."""
    doc = bench_doc([100, 101, 99, 100.5, 99.5])
    rec = copy.deepcopy(doc["records"][0])
    rec.update(lattice="d3q19", grid=[64, 64, 64])
    rec["mlups"] = {"median": sorted(second_values)[2], "min": min(second_values), "max": max(second_values),
                    "values": list(second_values)}
    if second_ev is not None:
        rec["evidence"] = second_ev
    doc["records"].append(rec)
    return doc


def test_a_regression_in_one_configuration_outweighs_an_inconclusive_one(tmp_path, capsys):
    """One configuration INCONCLUSIVE (another program, slower in two files), the other a structural REGRESSION:
    REGRESSION, exit 1, naming only the regressed one; without the regression the report is INCONCLUSIVE, exit 3."""
    a = two_configurations([100, 101, 99, 100.5, 99.5])
    b = two_configurations([100, 101, 99, 100.5, 99.5], second_ev=evidence(flops=260.0))
    b["records"][0]["mlups"].update(values=[75, 75.5, 74.5, 75, 75], median=75, min=74.5, max=75.5)
    b["records"][0]["evidence"]["custom_call_targets"] = ["lbm_d2q9_bbbb_aa_even"]
    assert run_compare(tmp_path, a, b) == 1
    out, word = verdict_of(capsys)
    closing = out.split("**Verdict")[-1]
    assert word == "REGRESSION" and "periodic 64x64x64 d3q19" in closing and "256x256" not in closing
    b["records"][1]["evidence"] = evidence()
    assert run_compare(tmp_path, a, b) == 3
    assert verdict_of(capsys)[1] == "INCONCLUSIVE"


def test_a_bench_of_several_collisions_is_compared_collision_by_collision(tmp_path, capsys):
    """bench.json of ``collisions=[bgk,kbc]``: one record per collision of the same configuration, matched by collision;
    more flops per cell in kbc's program is kbc's regression alone."""
    def doc(kbc_flops):
        d = bench_doc([100, 101, 99])
        kbc = copy.deepcopy(d["records"][0]) | {"collision": "kbc", "evidence": evidence(flops=kbc_flops)}
        kbc["mlups"].update(values=[70, 71, 69], median=70, min=69, max=71)
        d["records"].append(kbc)
        return d

    assert run_compare(tmp_path, doc(400.0), doc(400.0)) == 0
    out, word = verdict_of(capsys)
    assert word == "OK" and "Not compared" not in out
    assert "| periodic 256x256 d2q9 bgk xla float32 | identical |" in out
    assert "| periodic 256x256 d2q9 kbc xla float32 | identical |" in out
    assert run_compare(tmp_path, doc(400.0), doc(500.0)) == 1
    out, word = verdict_of(capsys)
    closing = out.split("**Verdict")[-1]
    assert word == "REGRESSION" and "kbc xla" in closing and "bgk xla" not in closing
    assert "flops per cell and step 400 -> 500 (+25.0%)" in out


def test_interleaved_rounds_of_work_on_an_accelerator_are_judged_by_the_wall_clock(monkeypatch):
    """A worker whose work ran on an accelerator sends no CPU time (the host's dispatch, near zero): the rounds'
    ratios are those of the wall clock, and the verdict says so."""
    from lbm.bench import interleave

    walls = {"base": 1.0, "new": 1.5}

    def time_one(self, i):
        self.cpu_s.setdefault(i, []).append(None)
        self.wall_s.setdefault(i, []).append(walls[self.python])

    monkeypatch.setattr(interleave.Side, "start", lambda self, configs, cwd: setattr(self, "n", len(configs)))
    monkeypatch.setattr(interleave.Side, "answer", lambda self: {"ready": True, "evidence": [None] * self.n})
    monkeypatch.setattr(interleave.Side, "time_one", time_one)
    monkeypatch.setattr(interleave.Side, "stop", lambda self: None)
    monkeypatch.setattr(interleave.sys, "executable", "new")
    rec = {"case": "periodic", "lattice": "d2q9", "grid": [16, 16], "variant": "pallas", "precision": "float32"}
    got = interleave.measure([(rec, rec)], "", "", 6, "base")[0]
    assert got.clock == interleave.WALL_CLOCK and got.log_ratios == pytest.approx([math.log(1.5)] * 6)

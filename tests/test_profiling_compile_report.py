"""The compile report writes the texts of the programs it is given and reads kernels and stages from them."""

import json

from conftest import SMALL_HLO

from lbm.profiling import compile_report

STAGES = ["collide", "stream"]


def program(name, stage):
    return {"name": name, "stage": stage, "jaxpr": f"{{ lambda ; a. let b = {name} a in (b,) }}",
            "stablehlo": "module @jit_chunk {}", "hlo": "HloModule jit_chunk", "optimized_hlo": SMALL_HLO,
            "cost": {"flops": 4.0, "bytes_accessed": 32.0, "transcendentals": 0.0}, "lower_ms": 1.5, "compile_ms": 7.0}


def test_report_of_given_programs(tmp_path, monkeypatch):
    monkeypatch.setattr(compile_report.shutil, "which", lambda name: None)
    report = compile_report.write_compile_report([program("fused_step", None), program("collide", "collide")],
                                                 STAGES, tmp_path)
    assert json.loads((tmp_path / "compile.json").read_text()) == report
    assert report["stages"] == STAGES and report["graphviz"] is False and "not installed" in report["graphviz_note"]
    fused, collide = report["executables"]
    # the fused program's kernels get the stages of their scopes; a stage's own program gives all of them its stage
    assert fused["kernels"] == {"f": ["collide", "stream"], "c": []} and fused["stage"] is None
    assert collide["kernels"] == {"f": ["collide"], "c": ["collide"]}
    assert fused["module"] == "jit_chunk" and fused["fusions"] == 1 and fused["kernels"] and fused["bytes_accessed"] == 32
    # the kernel without a stage scope is named with its HLO op and the scopes of what it reads
    assert fused["unscoped"] == {"c": "HLO copy in the entry computation, no scope (inserted by XLA); reads %f "
                                      "(timestep/stream/x); read by the computation's result"}
    assert "lower_ms" not in fused  # the run's compile is reported once, in breakdown.json
    for suffix in (".jaxpr.txt", ".stablehlo.mlir", ".hlo.txt", ".opt.hlo.txt", ".dot"):
        assert (tmp_path / f"fused_step{suffix}").is_file() and (tmp_path / f"collide{suffix}").is_file()
    assert (tmp_path / "fused_step.opt.hlo.txt").read_text() == SMALL_HLO
    assert sorted(fused["files"]) == ["dot", "hlo.txt", "jaxpr.txt", "opt.hlo.txt", "stablehlo.mlir"]


def test_missing_texts_are_not_written(tmp_path):
    p = program("stream", "stream")
    del p["jaxpr"], p["stablehlo"]
    (entry,) = compile_report.write_compile_report([p], STAGES, tmp_path)["executables"]
    assert "jaxpr.txt" not in entry["files"] and not (tmp_path / "stream.jaxpr.txt").exists()


def test_hlo_graph_rendered_only_with_graphviz(tmp_path, monkeypatch):
    dot = tmp_path / "g.dot"
    dot.write_text("digraph g { a -> b; }\n")
    monkeypatch.setattr(compile_report.shutil, "which", lambda name: None)
    assert compile_report.render_dot(dot) is None
    fake = tmp_path / "dot"
    fake.write_text('#!/bin/sh\ncp "$2" "$4"\n')  # dot -Tpng IN -o OUT
    fake.chmod(0o755)
    monkeypatch.setattr(compile_report.shutil, "which", lambda name: str(fake))
    assert compile_report.render_dot(dot) == tmp_path / "g.png" and (tmp_path / "g.png").exists()

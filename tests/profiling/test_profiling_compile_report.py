"""The compile report writes the texts of the programs it is given and reads kernels and stages from them."""

import json

from helpers.traces import SMALL_HLO

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


LOOP_HLO = """HloModule jit_chunk, entry_computation_layout={(f32[4]{0})->f32[4]{0}}

%fused (q: f32[4]) -> f32[4] {
  %q = f32[4]{0} parameter(0)
  ROOT %m = f32[4]{0} multiply(%q, %q), metadata={op_name="jit(chunk)/while/body/timestep/stream/mul"}
}

%body (p: (s32[], f32[4])) -> (s32[], f32[4]) {
  %p = (s32[], f32[4]{0}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %f = f32[4]{0} get-tuple-element(%p), index=1
  %c = f32[4]{0} copy(%f)
  %s = f32[4]{0} fusion(%c), kind=kLoop, calls=%fused, metadata={op_name="jit(chunk)/while/body/timestep/stream/x"}
  %one = s32[] constant(1)
  %n = s32[] add(%i, %one), metadata={op_name="jit(chunk)/while/body/add"}
  ROOT %t = (s32[], f32[4]{0}) tuple(%n, %s)
}

%cond (r: (s32[], f32[4])) -> pred[] {
  %r = (s32[], f32[4]{0}) parameter(0)
  %j = s32[] get-tuple-element(%r), index=0
  %k = s32[] constant(3)
  ROOT %lt = pred[] compare(%j, %k), direction=LT
}

ENTRY %main (a: f32[4]) -> f32[4] {
  %a = f32[4]{0} parameter(0)
  %zero = s32[] constant(0)
  %init = (s32[], f32[4]{0}) tuple(%zero, %a)
  %w = (s32[], f32[4]{0}) while(%init), condition=%cond, body=%body
  ROOT %out = f32[4]{0} get-tuple-element(%w), index=1
}
"""
"""A scanned chunk: a loop body with a copy XLA inserted (no metadata) before a stage's fusion, and the counter."""


def test_unscoped_kernels_of_a_loop_are_named_with_their_neighbours():
    from lbm.hlo import kernel_stages, parse_hlo

    module = parse_hlo(LOOP_HLO)
    found = compile_report.origins(module, kernel_stages(module, STAGES))
    assert "s" not in found  # the stage's fusion is scoped: not listed
    assert found["c"] == ("HLO copy in the loop body, no scope (inserted by XLA); reads %f (element 1 of the "
                          "computation's argument); read by %s (while/body/timestep/stream/x)")
    assert found["n"].startswith("HLO add in the loop body, scope while/body/add; reads %i (element 0")
    assert found["lt"].startswith("HLO compare in the loop condition")

"""``python -m lbm inspect``: the loop-body traffic reader on hand-written HLO, a real CPU compile, and deviceless
compiles for GPU and TPU targets (marked ``accel``; they need the compilers from ``bash scripts/accel_env.sh``)."""

from __future__ import annotations

import json

import pytest
from helpers.inspect_cli import CUDA, consistent, installed, run_cli, run_inspect

from lbm.hlo import array_bytes, loop_traffic, main_loop, tuple_elements
from lbm.stages import STAGES

# A scan-like loop over f32[9,4,8] populations (32 cells, 1152 B): a counter, a reduction (rho), an elementwise
# update that broadcasts rho, and the copy of the loop state. Bytes below are counted by hand.
LOOP = """HloModule jit_chunk, is_scheduled=true

%sum (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%fused_add (p0: s32[]) -> s32[] {
  %p0 = s32[] parameter(0)
  %one = s32[] constant(1)
  ROOT %add = s32[] add(%p0, %one), metadata={op_name="jit(chunk)/while/body/add"}
}

%fused_reduce (param_0.1: f32[9,4,8]) -> f32[4,8] {
  %param_0.1 = f32[9,4,8]{2,1,0} parameter(0)
  %z = f32[] constant(0)
  ROOT %r = f32[4,8]{1,0} reduce(%param_0.1, %z), dimensions={0}, to_apply=%sum, metadata={op_name="jit(chunk)/while/body/timestep/macroscopic/reduce_sum"}
}

%fused_step (param_0: f32[9,4,8], param_1: f32[4,8]) -> f32[9,4,8] {
  %param_0 = f32[9,4,8]{2,1,0} parameter(0)
  %param_1 = f32[4,8]{1,0} parameter(1)
  %bc = f32[9,4,8]{2,1,0} broadcast(%param_1), dimensions={1,2}
  ROOT %m = f32[9,4,8]{2,1,0} multiply(%param_0, %bc), metadata={op_name="jit(chunk)/while/body/timestep/collide/mul"}
}

%body (arg: (s32[], f32[9,4,8])) -> (s32[], f32[9,4,8]) {
  %arg = (s32[], f32[9,4,8]{2,1,0}) parameter(0)
  %i = s32[] get-tuple-element(%arg), index=0
  %f = f32[9,4,8]{2,1,0} get-tuple-element(%arg), index=1
  %inc = s32[] fusion(%i), kind=kLoop, calls=%fused_add
  %rho = f32[4,8]{1,0} fusion(%f), kind=kInput, calls=%fused_reduce
  %new = f32[9,4,8]{2,1,0} fusion(%f, %rho), kind=kLoop, calls=%fused_step
  %cp = f32[9,4,8]{2,1,0} copy(%new)
  ROOT %t = (s32[], f32[9,4,8]{2,1,0}) tuple(%inc, %cp)
}

%cond (arg.1: (s32[], f32[9,4,8])) -> pred[] {
  %arg.1 = (s32[], f32[9,4,8]{2,1,0}) parameter(0)
  %j = s32[] get-tuple-element(%arg.1), index=0
  %n = s32[] constant(7)
  ROOT %lt = pred[] compare(%j, %n), direction=LT
}

ENTRY %main (f0: f32[9,4,8]) -> f32[9,4,8] {
  %f0 = f32[9,4,8]{2,1,0} parameter(0)
  %zero = s32[] constant(0)
  %init = (s32[], f32[9,4,8]{2,1,0}) tuple(%zero, %f0)
  %w = (s32[], f32[9,4,8]{2,1,0}) while(%init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"5"}}
  ROOT %out = f32[9,4,8]{2,1,0} get-tuple-element(%w), index=1
}
"""  # noqa: E501


def rows(text):
    return {k.name: k for k in loop_traffic(text, STAGES).kernels}


def test_loop_body_kernels_stages_and_bytes():
    loop = loop_traffic(LOOP, STAGES)
    assert (loop.body, loop.trip_count) == ("body", 5)
    k = {r.name: r for r in loop.kernels}
    assert list(k) == ["inc", "rho", "new", "cp"]
    assert (k["inc"].bytes_read, k["inc"].bytes_written) == (4, 4)
    assert (k["rho"].bytes_read, k["rho"].bytes_written) == (1152, 128)  # the reduction reads every population
    assert (k["new"].bytes_read, k["new"].bytes_written) == (1152 + 128, 1152)  # rho read once, not per population
    assert (k["cp"].bytes_read, k["cp"].bytes_written) == (1152, 1152)
    assert (k["rho"].kind, k["new"].kind, k["cp"].kind) == ("kInput", "kLoop", "copy")
    assert k["rho"].stages == ["macroscopic"] and k["new"].stages == ["collide"] and k["cp"].stages == []
    assert loop.bytes == 8 + 1280 + 2432 + 2304
    assert loop.upper_bound == loop.bytes  # nothing sliced or updated in place here
    assert loop.on_chip_bytes == 0


def test_trip_count_from_the_condition_without_backend_config():
    text = LOOP.replace(', backend_config={"known_trip_count":{"n":"5"}}', "")
    assert main_loop(text) == ("body", 7)


def test_the_main_loop_is_the_one_that_holds_the_most_not_the_one_that_turns_most():
    # an odd chunk: its loop of AA pairs over the populations turns 4 times beside a loop of 9 small gathers (XLA's)
    def loop(name, shape, trip):
        return (f"%{name}_body (a: (s32[], {shape})) -> (s32[], {shape}) {{\n"
                f"  %a = (s32[], {shape}) parameter(0)\n"
                f"  %i = s32[] get-tuple-element(%a), index=0\n  %x = {shape} get-tuple-element(%a), index=1\n"
                f"  %y = {shape} negate(%x)\n  ROOT %t = (s32[], {shape}) tuple(%i, %y)\n}}\n\n"
                f"%{name}_cond (b: (s32[], {shape})) -> pred[] {{\n  %b = (s32[], {shape}) parameter(0)\n"
                f"  %j = s32[] get-tuple-element(%b), index=0\n  %n = s32[] constant({trip})\n"
                f"  ROOT %lt = pred[] compare(%j, %n), direction=LT\n}}\n\n")
    big, small = "f32[9,64,1024]{2,1,0}", "f32[9,8]{1,0}"
    text = ("HloModule jit_chunk\n\n" + loop("pairs", big, 4) + loop("gathers", small, 9)
            + f"ENTRY %main (f: {big}, g: {small}) -> {big} {{\n  %f = {big} parameter(0)\n  %g = {small} parameter(1)\n"
            f"  %z = s32[] constant(0)\n  %s = (s32[], {small}) tuple(%z, %g)\n"
            f"  %w1 = (s32[], {small}) while(%s), condition=%gathers_cond, body=%gathers_body\n"
            f"  %p = (s32[], {big}) tuple(%z, %f)\n"
            f"  %w2 = (s32[], {big}) while(%p), condition=%pairs_cond, body=%pairs_body\n"
            f"  ROOT %out = {big} get-tuple-element(%w2), index=1\n}}\n")
    assert main_loop(text) == ("pairs_body", 4)
    assert main_loop(text.replace("constant(4)", "constant(400000)").replace("f32[9,64,1024]", "f32[9,2]")) == (
        "pairs_body", 400000)


def test_program_without_a_loop_is_read_as_its_entry():
    assert main_loop(LOOP.split("%body")[0] + "ENTRY %e (x: f32[4]) -> f32[4] {\n  %x = f32[4]{0} parameter(0)\n"
                     "  ROOT %c = f32[4]{0} copy(%x)\n}\n") == ("e", 1)


# Kernels that touch part of their operands: a fusion that slices two rows, a gather behind an elementwise op,
# an in-place dynamic-update-slice, scatters (set and add), an unfused gather, an opaque custom call and a call.
PARTS = """HloModule parts, is_scheduled=true

%set (s0: f32[], s1: f32[]) -> f32[] {
  %s0 = f32[] parameter(0)
  ROOT %s1 = f32[] parameter(1)
}

%plus (q0: f32[], q1: f32[]) -> f32[] {
  %q0 = f32[] parameter(0)
  %q1 = f32[] parameter(1)
  ROOT %q2 = f32[] add(%q0, %q1)
}

%fused_slices (p: f32[9,10]) -> f32[2,10] {
  %p = f32[9,10]{1,0} parameter(0)
  %s1 = f32[1,10]{1,0} slice(%p), slice={[1:2], [0:10]}
  %s3 = f32[1,10]{1,0} slice(%p), slice={[3:4], [0:10]}
  ROOT %c = f32[2,10]{1,0} concatenate(%s1, %s3), dimensions={0}
}

%fused_gather (g0: f32[9,10], g1: s32[3,1]) -> f32[3,10] {
  %g0 = f32[9,10]{1,0} parameter(0)
  %g1 = s32[3,1]{1,0} parameter(1)
  %sq = f32[9,10]{1,0} multiply(%g0, %g0)
  ROOT %ga = f32[3,10]{1,0} gather(%sq, %g1), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,10}
}

%fused_dus (d0: f32[10,2], d1: f32[2], d2: s32[]) -> f32[10,2] {
  %d0 = f32[10,2]{1,0} parameter(0)
  %d1 = f32[2]{0} parameter(1)
  %d2 = s32[] parameter(2)
  %row = f32[1,2]{1,0} bitcast(%d1)
  %zero = s32[] constant(0)
  ROOT %dus = f32[10,2]{1,0} dynamic-update-slice(%d0, %row, %d2, %zero)
}

%cmd (c0: f32[9,10]) -> f32[9,10] {
  %c0 = f32[9,10]{1,0} parameter(0)
  ROOT %neg = f32[9,10]{1,0} negate(%c0)
}

ENTRY %main (f: f32[9,10], idx: s32[3,1], upd: f32[3,10], buf: f32[10,2], v: f32[2], k: s32[]) -> f32[9,10] {
  %f = f32[9,10]{1,0} parameter(0)
  %idx = s32[3,1]{1,0} parameter(1)
  %upd = f32[3,10]{1,0} parameter(2)
  %buf = f32[10,2]{1,0} parameter(3)
  %v = f32[2]{0} parameter(4)
  %k = s32[] parameter(5)
  %sl = f32[2,10]{1,0} fusion(%f), kind=kLoop, calls=%fused_slices
  %gf = f32[3,10]{1,0} fusion(%f, %idx), kind=kLoop, calls=%fused_gather
  %d = f32[10,2]{1,0} fusion(%buf, %v, %k), kind=kLoop, calls=%fused_dus
  %sset = f32[9,10]{1,0} scatter(%f, %idx, %upd), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%set
  %sadd = f32[9,10]{1,0} scatter(%f, %idx, %upd), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%plus
  %g = f32[3,10]{1,0} gather(%f, %idx), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,10}
  %cc = f32[9,10]{1,0} custom-call(%f), custom_call_target="my_kernel"
  %cb = f32[9,10]{1,0} call(%f), to_apply=%cmd
  ROOT %r = f32[9,10]{1,0} add(%sset, %sadd)
}
"""  # noqa: E501


def test_partial_reads_and_in_place_updates():
    k = rows(PARTS)
    assert (k["sl"].bytes_read, k["sl"].bytes_written) == (2 * 40, 80)  # two 40-byte rows of the 360-byte operand
    # a third of the rows, squared first: the operand is read for the gathered rows only, the indices whole
    assert (k["gf"].bytes_read, k["gf"].bytes_written) == (120 + 12, 120)
    assert (k["d"].bytes_read, k["d"].bytes_written) == (8 + 4, 8)  # update and index; the 80-byte buffer in place
    assert (k["sset"].bytes_read, k["sset"].bytes_written) == (12 + 120, 120)  # a set reads nothing of the target
    assert (k["sadd"].bytes_read, k["sadd"].bytes_written) == (12 + 120 + 120, 120)  # an add reads the updated rows
    assert (k["g"].bytes_read, k["g"].bytes_written) == (120 + 12, 120)
    assert (k["cc"].kind, k["cc"].bytes_read, k["cc"].bytes_written) == ("my_kernel", 360, 360)
    assert (k["neg"].bytes_read, k["neg"].bytes_written) == (360, 360)  # found inside the called computation
    assert "cb" not in k
    assert (k["r"].bytes_read, k["r"].bytes_written) == (720, 360)
    # the upper bound reads every operand and writes every result whole
    assert k["sl"].upper_bound == 360 + 80 and k["d"].upper_bound == 80 + 8 + 4 + 80


def test_layout_tiling_memory_space_and_tuples():
    assert array_bytes("f32[9,420,180]{2,1,0}") == 9 * 420 * 180 * 4
    assert array_bytes("f32[9,420,180]{2,1,0:T(8,128)}") == 9 * 424 * 256 * 4  # minor dims padded to the tile
    assert array_bytes("f32[9,420,180]{2,1,0:T(8,128)S(1)}") == 0  # on chip (TPU VMEM)
    assert array_bytes("f32[9,420,180]{2,1,0:T(8,128)S(1)}", space=1) == 9 * 424 * 256 * 4
    assert array_bytes("(f32[2,3]{1,0}, pred[5]{0}, s32[])", space=None) == 24 + 5 + 4
    assert tuple_elements("((f32[10,2]{1,0}, s32[]), f32[10,2]{1,0}, u32[])") == [
        "(f32[10,2]{1,0}, s32[])", "f32[10,2]{1,0}", "u32[]"]
    assert tuple_elements("f32[4]{0}") == ["f32[4]{0}"]


def test_async_copy_between_memory_spaces():
    text = """HloModule a, is_scheduled=true

ENTRY %main (x: f32[256,128]) -> f32[256,128] {
  %x = f32[256,128]{1,0:T(8,128)} parameter(0)
  %in = (f32[256,128]{1,0:T(8,128)S(1)}, f32[256,128]{1,0:T(8,128)}, u32[]{:S(2)}) copy-start(%x)
  %ind = f32[256,128]{1,0:T(8,128)S(1)} copy-done(%in)
  %y = f32[256,128]{1,0:T(8,128)S(1)} negate(%ind)
  %out = (f32[256,128]{1,0:T(8,128)}, f32[256,128]{1,0:T(8,128)S(1)}, u32[]{:S(2)}) copy-start(%y)
  ROOT %outd = f32[256,128]{1,0:T(8,128)} copy-done(%out)
}
"""
    k = rows(text)
    n = 256 * 128 * 4
    assert list(k) == ["in", "y", "out"]  # *-done moves nothing
    assert (k["in"].bytes_read, k["in"].bytes_written, k["in"].on_chip_written) == (n, 0, n)
    assert (k["y"].bytes_read, k["y"].bytes_written, k["y"].on_chip_read, k["y"].on_chip_written) == (0, 0, n, n)
    assert (k["out"].bytes_read, k["out"].bytes_written, k["out"].on_chip_read) == (0, n, n)


def test_a_kernel_that_declares_its_bytes_moves_what_it_declares():
    # two Mosaic kernels over populations f (memory) and link bits (on chip): one declares the bytes it accesses
    # (lbm's DMA-ring kernels with the walls' longer read windows: pl.CostEstimate), one does not (whole operands)
    f, bits = "f32[19,16,8,128]{3,2,1,0:T(8,128)}", "s32[16,8,128]{2,1,0:T(8,128)S(1)}"
    declared = 5_000_000
    text = f"""HloModule a, is_scheduled=true

ENTRY %main (f: f32[19,16,8,128], b: s32[16,8,128]) -> f32[19,16,8,128] {{
  %f = {f} parameter(0)
  %b = {bits} parameter(1)
  %odd = {f} custom-call(%f, %b), custom_call_target="tpu_custom_call", output_to_operand_aliasing={{{{}}: (0, {{}})}}, backend_config={{"custom_call_config": {{"body":"TUxJUg==","cost_estimate":{{"flops":"0","transcendentals":"0","bytes_accessed":"{declared}","remote_bytes_transferred":"0"}},"needs_layout_passes":true}}}}
  ROOT %even = {f} custom-call(%odd, %b), custom_call_target="tpu_custom_call", backend_config={{"custom_call_config": {{"body":"TUxJUg=="}}}}
}}
"""  # noqa: E501
    k = rows(text)
    pops, on_chip = 19 * 16 * 8 * 128 * 4, 16 * 8 * 128 * 4
    # declared = results written whole + operands on chip whole + the rest read from memory
    assert (k["odd"].bytes_read, k["odd"].bytes_written) == (declared - pops - on_chip, pops)
    assert (k["odd"].on_chip_read, k["odd"].on_chip_written) == (on_chip, 0)
    assert k["odd"].upper_bound == 2 * pops  # its operands and result whole, as before
    assert (k["even"].bytes_read, k["even"].bytes_written, k["even"].on_chip_read) == (pops, pops, on_chip)


# --- the command, compiled for this machine --------------------------------------------------------------------

KEYS = {"target", "engine", "kernels_per_step", "steps_per_loop_body", "bytes_per_cell_step", "min_bytes_per_cell_step",
        "traffic_ratio", "projected_mlups", "projected_fraction_of_roofline", "kernels", "hlo_file"}


def inspect(tmp_path, *args):
    from lbm.bench.inspect import main

    assert main([*args, "--out", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "inspect.json").read_text())
    assert KEYS <= set(record)
    assert (tmp_path / record["hlo_file"]).read_text().startswith("HloModule")
    return record


@pytest.mark.native
def test_cpu_inspect_of_a_periodic_box(tmp_path):
    rec = inspect(tmp_path, "target=cpu", "case=taylor_green", "grid.nx=32", "grid.ny=32", "steps=40")
    assert rec["engine"] == "native"  # what auto picks on a CPU with a compiler
    consistent(rec, 9, 4)
    assert rec["target"]["platform"] == "cpu" and rec["target"]["bandwidth_gbs"] > 0
    # the run's own chunk: the automatic output.every, 100 steps at most the run's 40
    assert rec["grid"] == [32, 32] and rec["cells"] == 1024 and rec["chunk_steps"] == 40
    # a timestep must read and write every population at least once
    assert rec["traffic_ratio"] >= 1 - 1e-9
    assert rec["projected_mlups"] == pytest.approx(rec["target"]["bandwidth_gbs"] * 1e3 / rec["bytes_per_cell_step"])
    # the in-place AA kernel moves each population once per step; the loop counter adds a few scalar bytes (at
    # most 16) per iteration of two steps
    assert rec["steps_per_loop_body"] == 2
    assert 72 <= rec["bytes_per_cell_step"] <= 72 + 16 / (2 * 1024)


@pytest.mark.slow
def test_cpu_inspect_of_the_xla_engine_in_float64(tmp_path):
    rec = inspect(tmp_path, "target=cpu", "engine=xla", "precision=float64", "case=taylor_green", "grid.nx=16",
                  "grid.ny=16", "steps=40")
    consistent(rec, 9, 8)
    assert rec["engine"] == "xla" and rec["steps_per_loop_body"] == 2 and rec["traffic_ratio"] >= 1 - 1e-9
    assert any("stream" in k["stages"] for k in rec["kernels"])


def test_bad_targets_are_one_line_errors(tmp_path):
    from lbm.cli import main

    assert main(["inspect", "target=h900", "--out", str(tmp_path)]) == 2
    assert main(["inspect", "target=v5e", "engine=native", "--out", str(tmp_path)]) == 2
    assert main(["inspect", "-m", "grid.nx=32,64", "--out", str(tmp_path)]) == 2
    assert not (tmp_path / "inspect.json").exists()




@pytest.mark.skipif(installed(CUDA), reason="the CUDA plugin is installed here")
def test_without_the_cuda_plugin_one_line_says_how_to_get_it(tmp_path):
    res = run_cli("target=h100", "--out", str(tmp_path))
    assert res.returncode == 2
    assert len(res.stderr.strip().splitlines()) == 1 and "bash scripts/accel_env.sh" in res.stderr
    assert ".venv-accel/bin/python -m lbm inspect" in res.stderr


# --- deviceless compiles for accelerators (bash scripts/accel_env.sh; CI: .venv-accel/bin/python -m pytest -m accel)

CASES = {"box": ["case=taylor_green", "grid.nx=64", "grid.ny=64", "steps=40"], "cylinder": ["steps=100"]}


@pytest.mark.accel
@pytest.mark.parametrize("target,module", [("h100", CUDA), ("v5e", "libtpu")])
@pytest.mark.parametrize("case", sorted(CASES))
def test_deviceless_compile(tmp_path, target, module, case):
    if not installed(module):
        pytest.skip(f"{module} is not installed (bash scripts/accel_env.sh)")
    # on a TPU auto picks xla where there are walls (lbm.engines.auto_choice): the pallas kernel is named there
    named = ["engine=pallas"] if target == "v5e" else []
    res = run_inspect(f"target={target}", *CASES[case], *named, "--out", str(tmp_path))
    assert res.returncode == 0, res.stderr[-2000:]
    rec = json.loads((tmp_path / "inspect.json").read_text())
    assert KEYS <= set(rec)
    assert rec["target"]["name"] == target and rec["target"]["platform"] in ("cuda", "tpu")
    assert rec["engine"] == "pallas"
    hlo = (tmp_path / rec["hlo_file"]).read_text()
    assert hlo.startswith("HloModule")
    consistent(rec, 9, 4)
    # every population is read and written at least once per step, in memory or (TPU) on chip
    assert rec["bytes_per_cell_step"] + rec["on_chip_bytes_per_cell_step"] >= rec["min_bytes_per_cell_step"]
    stages = {s for k in rec["kernels"] for s in k["stages"]}
    assert {"collide", "stream"} <= stages
    if case == "cylinder":
        # on v5e the pallas engine's outflow (a copy among 1.8 k gathered block cells) fuses into kernels that XLA
        # names after other stages; on h100 it keeps a kernel of its own
        assert {"inlet", "bounce_back"} | ({"outflow"} if target == "h100" else set()) <= stages
    assert "kernel" in res.stdout and "projected_mlups" in res.stdout


def test_multi_device_targets_refused_in_one_line(tmp_path):
    from lbm.cli import main

    assert main(["inspect", "target=cpu:2x2", "--out", str(tmp_path)]) == 2  # this machine's CPU is one device
    assert main(["inspect", "target=h100:4", "--out", str(tmp_path)]) == 2  # CUDA: partitions x hosts x GPUs
    assert main(["inspect", "target=v5e:2xy", "--out", str(tmp_path)]) == 2
    assert not (tmp_path / "inspect.json").exists()


@pytest.mark.accel
def test_a_mesh_that_does_not_divide_the_cases_own_grid_is_a_one_line_error(tmp_path, capsys):
    """schafer_turek derives its grid from its diameter (89 x 18 at 4 cells): the mesh is checked against that grid."""
    from lbm.cli import main

    if not installed("libtpu"):
        pytest.skip("libtpu is not installed (bash scripts/accel_env.sh)")

    args = ["inspect", "target=v5e:2x2", "case=schafer_turek", "case.cells_per_diameter=4", "parallel.mesh=[1,4]"]
    assert main([*args, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("lbm: error: grid.ny=18 is invalid: expected a multiple of 4")
    assert not (tmp_path / "inspect.json").exists()


# Sharded deviceless compiles: the halo bytes each device sends per step, read from the compiled HLO, against a
# count by hand: (entering populations per face) x (face cells) x 2 faces x 4 bytes (float32). The periodic box runs
# the Pallas kernel on each shard, whose halo returns the wrapped populations on the shard's own faces; the cylinder
# runs the Pallas kernel on each shard too; the shards holding the ghost cells its boundary plan reads send
# their 9 populations (``halo_plan_bytes_per_step``, from the plan): more than none, fewer than whole faces.
SHARDED = {
    # v5e:2x2 -> mesh 2x2, shards 32x16: x faces 16 cells, y faces 32 cells, 3 of 9 populations each
    "v5e:2x2 d2q9": (["target=v5e:2x2", "case=taylor_green", "grid.nx=64", "grid.ny=32", "steps=40"],
                     [2, 2], "pallas", 3 * (16 + 32) * 2 * 4),
    # mesh 2x2x1, shards 8x8x16: x faces 8x16 cells, y faces 8x16, 5 of 19 populations each
    "v5e:2x2 d3q19": (["target=v5e:2x2", "lattice=d3q19", "case=taylor_green", "grid.nx=16", "grid.ny=16",
                       "grid.nz=16", "steps=40"], [2, 2, 1], "pallas", 5 * (8 * 16 + 8 * 16) * 2 * 4),
    # the cylinder (walls, inlet, outflow, forces) on v5e:2x2: shards 210x90, the wrapped populations on the
    # shard's own faces (x faces 90 cells, y faces 210); and the plan's ghost cells, below
    "v5e:2x2 cylinder": (["target=v5e:2x2", "steps=100"], [2, 2], "pallas", 3 * (90 + 210) * 2 * 4),
    # the cylinder on four GPUs, mesh 4x1, shards 105x180: x faces 180 cells
    "h100:1x1x4 cylinder": (["target=h100:1x1x4", "steps=100"], [4, 1], "pallas", 3 * 180 * 2 * 4),
    # four GPUs on one host (the CUDA plugin's topology partitions x hosts x GPUs per host), mesh 4x1: x faces only
    "h100:1x1x4 d2q9": (["target=h100:1x1x4", "case=taylor_green", "grid.nx=64", "grid.ny=32", "steps=40"],
                        [4, 1], "pallas", 3 * 32 * 2 * 4),
}


@pytest.mark.accel
@pytest.mark.parametrize("name", sorted(SHARDED))
def test_sharded_deviceless_compile_halo_bytes_and_collectives(tmp_path, name):
    args, mesh, engine, halo = SHARDED[name]
    module = "libtpu" if name.startswith("v5e") else CUDA
    if not installed(module):
        pytest.skip(f"{module} is not installed (bash scripts/accel_env.sh)")
    res = run_inspect(*args, "--out", str(tmp_path))
    assert res.returncode == 0, res.stderr[-2000:]
    rec = json.loads((tmp_path / "inspect.json").read_text())
    p = rec["parallel"]
    assert p["devices"] == 4 and rec["target"]["devices"] == 4 and p["mesh"] == mesh
    assert rec["engine"] == engine
    assert engine == "pallas"  # the Pallas kernel on each shard, as auto runs it on one device
    assert any(k["kind"] in ("tpu_custom_call", "__gpu$xla.gpu.triton") for k in rec["kernels"])
    assert "xla step" not in rec["engine_note"]
    plan = p["halo_plan_bytes_per_step"]
    assert p["halo_bytes_per_step"] == halo + plan == p["halo_bytes_per_step_expected"]
    if "cylinder" in name:  # all 9 populations of some, not all, face cells (cells x 2 faces x 4 B)
        assert 0 < plan < 9 * (sum(rec["cells_per_device"] // n for n in p["shard"]) * 2 * 4)
    else:
        assert plan == 0
    kinds = {(c["kind"], tuple(c["stages"])) for c in p["collectives_per_step"]}
    expected = {("collective-permute", ("halo",))} | ({("all-reduce", ("forces",))} if "cylinder" in name else set())
    assert kinds == expected  # nothing all-gathered: only the halo's permutes and the forces' sum
    halo_rows = [c for c in p["collectives_per_step"] if c["kind"] == "collective-permute"]
    assert all(c["where"] == "loop body" for c in halo_rows)
    # one permute per direction and sharded axis, unless XLA combines the two of an axis into one; twice that with
    # boundary conditions (the plan's ghost cells before the kernel, the wrapped populations after it)
    exchanges = sum(m > 1 for m in mesh) * (2 if "cylinder" in name else 1)
    assert exchanges <= sum(c["count"] for c in halo_rows) <= 2 * exchanges
    assert rec["cells_per_device"] * 4 == rec["cells"]
    assert "halo_bytes_per_step" in res.stdout and "collective-permute" in res.stdout

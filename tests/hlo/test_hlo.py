"""lbm.hlo, the one reader of compiled HLO: kernels and their stages, fusion facts, cost, DOT graph."""

import jax
import jax.numpy as jnp
from helpers.traces import SMALL_HLO

from lbm.hlo import (
    collectives,
    compiled_cost,
    count_fusions,
    count_ops,
    fusion_inventory,
    kernel_bytes,
    kernel_stages,
    loop_body,
    parse_hlo,
    program_facts,
    stages_in,
    to_dot,
)

# A scanned chunk as XLA:CPU prints it: a while loop whose body holds two fusions (one of the backend's own kind,
# with a nested fusion inside), a custom call and a fusion of the entry outside the loop.
BULK = "jit(chunk)/while/body/timestep/fused_bulk+macroscopic+equilibrium/dot"
LOOP = """HloModule jit_chunk, entry_computation_layout={(f32[8]{0})->f32[8]{0}}

%inner (q: f32[8]) -> f32[8] {
  %q = f32[8]{0} parameter(0)
  ROOT %n = f32[8]{0} negate(%q), metadata={op_name="jit(chunk)/while/body/timestep/equilibrium/neg"}
}

%ynn (q0: f32[8]) -> f32[8] {
  %q0 = f32[8]{0} parameter(0)
  ROOT %nested = f32[8]{0} fusion(%q0), kind=kLoop, calls=%inner
}

%loop_fused (r: f32[8]) -> f32[8] {
  %r = f32[8]{0} parameter(0)
  ROOT %s = f32[8]{0} add(%r, %r), metadata={op_name="jit(chunk)/while/body/timestep/collide/add"}
}

%body (t: (s32[], f32[8])) -> (s32[], f32[8]) {
  %t = (s32[], f32[8]{0}) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %x = f32[8]{0} get-tuple-element(%t), index=1
  %y = f32[8]{0} fusion(%x), kind=kCustom, calls=%ynn, backend_config={"kind":"__ynn_fusion"}, metadata={op_name="BULK"}
  %z = f32[8]{0} fusion(%y), kind=kLoop, calls=%loop_fused
  %k = f32[8]{0} custom-call(%z), custom_call_target="lbm_bulk", metadata={op_name="jit(chunk)/while/body/timestep/stream/k"}
  ROOT %out = (s32[], f32[8]{0}) tuple(%i, %k)
}

%cond (c: (s32[], f32[8])) -> pred[] {
  %c = (s32[], f32[8]{0}) parameter(0)
  ROOT %lt = pred[] constant(true)
}

%pre (u: f32[8]) -> f32[8] {
  %u = f32[8]{0} parameter(0)
  ROOT %v = f32[8]{0} multiply(%u, %u)
}

ENTRY %main (a: f32[8]) -> f32[8] {
  %a = f32[8]{0} parameter(0)
  %e = f32[8]{0} fusion(%a), kind=kLoop, calls=%pre
  %zero = s32[] constant(0)
  %init = (s32[], f32[8]{0}) tuple(%zero, %e)
  %w = (s32[], f32[8]{0}) while(%init), condition=%cond, body=%body
  ROOT %res = f32[8]{0} get-tuple-element(%w), index=1
}
""".replace("BULK", BULK)
STAGES = ["macroscopic", "equilibrium", "collide", "stream"]


def test_kernels_stages_bytes_and_counts():
    module = parse_hlo(SMALL_HLO)
    assert module.name == "jit_chunk" and module.entry == "main"
    assert kernel_stages(module, ["collide", "stream"]) == {"f": ["collide", "stream"], "c": []}
    assert count_ops(module)["fusions"] == 1 and count_ops(module)["kernels"] == 2
    assert kernel_bytes(module)["f"] == 32  # f32[4] operand + f32[4] result
    dot = to_dot(module, ["collide", "stream"])
    assert dot.startswith("digraph hlo {") and '"f" -> "c";' in dot and '"a" -> "f";' in dot


def test_loop_facts_inventory_and_bulk_scope():
    module = parse_hlo(LOOP)
    assert loop_body(module) == "body"
    facts = program_facts(module)
    # kernel level: e (entry), y, z (loop body) are fusions; the nested fusion inside %ynn is not a kernel
    assert facts["fusions"] == 3 and facts["fusions_in_loop_body"] == 2 and facts["custom_calls"] == 1
    assert facts["fusion_kinds"] == {"kLoop": 2, "__ynn_fusion": 1}
    assert facts["custom_call_targets"] == {"lbm_bulk": 1}
    assert facts["special_fusions"] == [{"fusion": "y", "kind": "__ynn_fusion", "op_name": BULK}]
    assert fusion_inventory(module, special_max=0)["special_fusions"] == []
    ks = kernel_stages(module, STAGES)  # '+'-joined scope split; the nested fusion's equilibrium found
    assert ks["y"] == ["macroscopic", "equilibrium"] and ks["z"] == ["collide"] and ks["k"] == ["stream"]
    assert count_fusions(LOOP) == 4  # every fusion instruction, the nested one included


def test_without_a_loop_and_count_fusions_of_a_bare_entry():
    assert loop_body(parse_hlo(SMALL_HLO)) is None and program_facts(parse_hlo(SMALL_HLO))["fusions_in_loop_body"] is None
    assert count_fusions("ENTRY e {\n  %a = f32[4] fusion(%p), kind=kLoop\n  ROOT %b = f32[4] fusion(%a), kind=kLoop\n}") == 2


def test_compiled_cost_of_a_real_executable():
    compiled = jax.jit(lambda x: jnp.sin(x) * 2.0).lower(jax.ShapeDtypeStruct((1000,), jnp.float32)).compile()
    cost = compiled_cost(compiled)
    # reads 4000 bytes and writes 4000 bytes at least; 1000 sines
    assert cost["bytes_accessed"] >= 8000 and cost["transcendentals"] == 1000

    class NoCost:
        def cost_analysis(self):
            raise NotImplementedError

    assert compiled_cost(NoCost()) == {"flops": None, "bytes_accessed": None, "transcendentals": None}


# A sharded chunk: in the loop body a TPU-style async permute (start/done, tiled layouts: logical bytes count), a
# GPU-style sync permute of two operands, an all-gather wrapped in async-start; outside the loop XLA's sunk
# all-reduce of the stacked forces. Bytes by hand: 3*1*128*4 = 1536; 2 * 3*66*4 = 1584; 2*8*4 = 64; 10*2*4 = 80.
HALO_OP = 'metadata={op_name="jit(local)/shard_map/while/body/timestep/halo/ppermute"}'
SHARDED = f"""HloModule jit_local, is_scheduled=true

%gather (g0: f32[2,8]) -> f32[8,8] {{
  %g0 = f32[2,8]{{1,0}} parameter(0)
  ROOT %ag = f32[8,8]{{1,0}} all-gather(%g0), dimensions={{0}}, metadata={{op_name="jit(local)/timestep/forces/ag"}}
}}

%sum (a: f32[], b: f32[]) -> f32[] {{
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}}

%body (arg: (s32[], f32[3,1,128], f32[3,66], f32[3,66], f32[2,8])) -> (s32[], f32[3,1,128]) {{
  %arg = (s32[], f32[3,1,128], f32[3,66], f32[3,66], f32[2,8]) parameter(0)
  %i = s32[] get-tuple-element(%arg), index=0
  %x = f32[3,1,128]{{2,0,1:T(4,128)S(1)}} get-tuple-element(%arg), index=1
  %y0 = f32[3,66]{{1,0}} get-tuple-element(%arg), index=2
  %y1 = f32[3,66]{{1,0}} get-tuple-element(%arg), index=3
  %g = f32[2,8]{{1,0}} get-tuple-element(%arg), index=4
  %cps = (f32[3,1,128]{{2,0,1:T(4,128)S(1)}}, f32[3,1,128]{{2,0,1:T(4,128)S(1)}}, u32[], u32[]) collective-permute-start(%x), channel_id=1, source_target_pairs={{{{0,1}},{{1,0}}}}, {HALO_OP}
  %cpd = f32[3,1,128]{{2,0,1:T(4,128)S(1)}} collective-permute-done(%cps), {HALO_OP}
  %cp2 = (f32[3,66]{{1,0}}, f32[3,66]{{1,0}}) collective-permute(%y0, %y1), channel_id=2, source_target_pairs={{{{0,1}},{{1,0}}}}, {HALO_OP}
  %ags = ((f32[2,8]{{1,0}}), f32[8,8]{{1,0}}) async-start(%g), calls=%gather
  %agd = f32[8,8]{{1,0}} async-done(%ags)
  ROOT %t = (s32[], f32[3,1,128]) tuple(%i, %cpd)
}}

%cond (c: (s32[], f32[3,1,128], f32[3,66], f32[3,66], f32[2,8])) -> pred[] {{
  %c = (s32[], f32[3,1,128], f32[3,66], f32[3,66], f32[2,8]) parameter(0)
  %j = s32[] get-tuple-element(%c), index=0
  %n = s32[] constant(10)
  ROOT %lt = pred[] compare(%j, %n), direction=LT
}}

ENTRY %main (p: (s32[], f32[3,1,128], f32[3,66], f32[3,66], f32[2,8]), forces: f32[10,2]) -> f32[10,2] {{
  %p = (s32[], f32[3,1,128], f32[3,66], f32[3,66], f32[2,8]) parameter(0)
  %forces = f32[10,2]{{1,0}} parameter(1)
  %w = (s32[], f32[3,1,128]) while(%p), condition=%cond, body=%body
  ROOT %psum = f32[10,2]{{1,0}} all-reduce(%forces), to_apply=%sum, metadata={{op_name="jit(local)/while/body/timestep/forces/psum"}}
}}
"""  # noqa: E501


def test_collectives_of_a_sharded_chunk_in_and_outside_the_loop():
    rows = {(r.kind, tuple(r.stages), r.in_loop): (r.count, r.bytes_per_device)
            for r in collectives(SHARDED, ("forces", "halo"))}
    assert rows == {("collective-permute", ("halo",), True): (2, 1536 + 1584),
                    ("all-gather", ("forces",), True): (1, 64),
                    ("all-reduce", ("forces",), False): (1, 80)}


def test_stages_of_a_bulk_kernel_scope_with_plus_or_identifier_separators():
    """A Pallas bulk kernel reaches a GPU trace under its Triton name, where ``+`` became ``_``: same stages."""
    stages = ("outflow", "macroscopic", "equilibrium", "collide", "bounce_back", "stream")
    joined = "jit(chunk)/while/body/fused_bulk+macroscopic+equilibrium+collide+stream"
    triton = "jit(chunk)/while/body/fused_bulk_macroscopic_equilibrium_collide_stream"
    assert stages_in(joined, stages) == stages_in(triton, stages) == ["macroscopic", "equilibrium", "collide",
                                                                       "stream"]
    assert stages_in("fused_bulk_bounce_back_stream", stages) == ["bounce_back", "stream"]
    # only a bulk-prefixed component is read for stage words; other scopes keep their exact names
    assert stages_in("jit(chunk)/outflow/loop_collide_fusion", stages) == ["outflow"]
    assert stages_in("fused_bulk", stages) == []

"""Reading optimised HLO text: one parser (:mod:`lbm.hlo.parse`), the traffic model (:mod:`lbm.hlo.traffic`), and a
DOT graph (:mod:`lbm.hlo.graph`).

Stage names reach the HLO as ``jax.named_scope`` components of each instruction's
``metadata={op_name="jit(chunk)/.../timestep/collide/mul"}``. A kernel (a top-level
instruction: what a CPU thunk or a GPU kernel executes, named by the trace's ``hlo_op``)
contains the stages named in its own op_name and in those of the instructions of the
computation it calls (a fusion's fused computation).
"""

from lbm.hlo.graph import STAGE_COLORS, to_dot
from lbm.hlo.parse import (
    ITEMSIZE,
    TRIVIAL,
    HloModule,
    Instruction,
    array_bytes,
    by_name,
    compiled_cost,
    count_fusions,
    count_ops,
    fusion_inventory,
    fusion_kind,
    kernel_bytes,
    kernel_stages,
    loop_body,
    parse_hlo,
    planned_bytes,
    program_facts,
    stages_in,
)
from lbm.hlo.traffic import (
    COLLECTIVES,
    CollectiveTraffic,
    KernelTraffic,
    LoopTraffic,
    collective_kind,
    collectives,
    loop_traffic,
    main_loop,
    program_traffic,
    trip_count,
    tuple_elements,
)

__all__ = ["COLLECTIVES", "ITEMSIZE", "STAGE_COLORS", "TRIVIAL", "CollectiveTraffic", "HloModule", "Instruction",
           "KernelTraffic", "LoopTraffic", "array_bytes", "by_name", "collective_kind", "collectives", "compiled_cost",
           "count_fusions", "count_ops", "fusion_inventory", "fusion_kind", "kernel_bytes", "kernel_stages",
           "loop_body", "loop_traffic", "main_loop", "parse_hlo", "planned_bytes", "program_facts", "program_traffic",
           "stages_in", "to_dot", "trip_count", "tuple_elements"]

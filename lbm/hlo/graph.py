"""A Graphviz DOT graph of a parsed HLO module's kernels, coloured by the stages they contain."""

from __future__ import annotations

from collections.abc import Iterable

from lbm.hlo.parse import TRIVIAL, HloModule, kernel_stages

STAGE_COLORS = {"outflow": "#8dd3c7", "macroscopic": "#ffffb3", "equilibrium": "#bebada", "inlet": "#fb8072",
                "collide": "#80b1d3", "bounce_back": "#fdb462", "forces": "#b3de69", "stream": "#fccde5",
                "timestep": "#d9d9d9"}


def to_dot(module: HloModule, stages: Iterable[str], title: str = "") -> str:
    """A Graphviz DOT graph of the kernels and their data flow, coloured by the stage(s) they contain."""
    ks = kernel_stages(module, stages)
    lines = ["digraph hlo {", '  rankdir=TB; node [shape=box, style="filled,rounded", fontname="Helvetica", fontsize=10];',
             f'  label="{title or module.name}"; labelloc=t;']
    names: set[str] = set()
    for comp in module.top_level():
        for ins in module.computations.get(comp, []):
            if ins.opcode in TRIVIAL and ins.opcode != "parameter":
                continue
            names.add(ins.name)
            st = ks.get(ins.name, [])
            color = STAGE_COLORS.get(st[0], "#ffffff") if len(st) == 1 else ("#eeeeee" if not st else "#ffd92f")
            label = f"{ins.name}\\n{ins.opcode}" + (f"\\n[{'+'.join(st)}]" if st else "")
            lines.append(f'  "{ins.name}" [label="{label}", fillcolor="{color}"];')
    for comp in module.top_level():
        for ins in module.computations.get(comp, []):
            if ins.name not in names:
                continue
            for o in ins.operands:
                if o in names:
                    lines.append(f'  "{o}" -> "{ins.name}";')
    lines.append("}")
    return "\n".join(lines) + "\n"

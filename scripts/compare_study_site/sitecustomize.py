"""Known changes for scripts/compare_study.py, applied at interpreter start when LBM_STUDY_INJECT is set.

``LBM_STUDY_INJECT=xla:R``: the collide stage of the xla engine does R extra multiplications per population,
plus 2 flops to fold them in (XLA computes them in both consumers of the collided populations: 2 (R + 2) flops
per population, and its cost analysis counts them). ``native:E``: the native kernel's
generated collision does E extra arithmetic operations per cell (E/2 statements ``o = (o + 1e-30) - 1e-30``,
cycling over the populations: exact for populations far above 1e-30, and kept by a compiler without
-ffast-math). Only this study's processes put this directory on PYTHONPATH.
"""

import os

_SPEC = os.environ.get("LBM_STUDY_INJECT", "")


def _inject_xla(rounds: int) -> None:
    from lbm.engines import timestep

    core = timestep.CORE["collide"]

    def slow_collide(s, setup):  # noqa: ANN001, ANN202
        s = core(s, setup)
        extra = s.post
        for _ in range(rounds):
            extra = extra * 1.0001
        post = s.post + 0.0 * extra  # 0*x is not simplified away for floats (NaN semantics)
        return s.replace(collided=post, post=post)

    timestep.CORE["collide"] = slow_collide


def _inject_native(ops: int) -> None:
    from lbm.engines.native import codegen

    body = codegen.collide_body

    def slow_body(spec, inlet=False):  # noqa: ANN001, ANN202
        lines = body(spec, inlet)
        q = spec.lattice.q
        return lines + [f"o{j % q} = (o{j % q} + (real)1e-30) - (real)1e-30;" for j in range(ops // 2)]

    codegen.collide_body = slow_body


if _SPEC:
    _engine, *_args = _SPEC.split(":")
    {"xla": _inject_xla, "native": _inject_native}[_engine](*map(int, _args))

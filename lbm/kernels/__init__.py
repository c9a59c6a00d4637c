"""Pure jax.numpy kernels, one module per concern; arrays in, arrays out.

Shapes: populations ``f`` are ``(Q, *grid)``; density ``rho`` is ``grid``;
velocity ``u`` is ``(D, *grid)``. Lattice constants are static Python/numpy data.

These modules are the reference physics: the xla and instrumented engines run them. The two fast engines
compute the same step elsewhere:
- the Pallas kernels (lbm.engines.pallas.cell) call these functions on per-direction arrays
  (lbm.kernels.directions): every collision kind and its forcing (collisions/), the momentum and
  c_i . u; the density and the equilibrium, whose functions here take stacked arrays, are written there in
  the same formulas;
- the native kernel's C++ is generated from the lattice (lbm.engines.native.codegen).
Tests pin both to the xla engine: tests/engines/test_engines.py (``test_native_engine_equals_the_reference``),
tests/engines/native/test_engines_native.py (``test_native_kernels_equal_collide_then_stream``),
tests/engines/pallas/test_engines_pallas.py (``test_flat_kernel_engine_equals_the_reference``,
``test_kernels_equal_collide_then_stream``: BGK, TRT) and tests/engines/pallas/test_pallas_collisions.py
(``test_the_pallas_engine_equals_the_xla_engine``: mrt, the regularized kinds, kbc).
"""

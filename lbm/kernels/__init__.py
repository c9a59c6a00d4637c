"""Pure jax.numpy kernels, one module per concern; arrays in, arrays out.

Shapes: populations ``f`` are ``(Q, *grid)``; density ``rho`` is ``grid``;
velocity ``u`` is ``(D, *grid)``. Lattice constants are static Python/numpy data.

The physics is written three times: here (jax.numpy, the reference, which the xla engine runs), in the Pallas
cell body (lbm.engines.pallas.cell, per-direction arrays) and in the generated C++ of the native kernel
(lbm.engines.native.codegen). Tests pin the copies to this reference: tests/test_engines.py
(``test_native_engine_equals_the_reference``), tests/test_engines_native.py
(``test_native_kernels_equal_collide_then_stream``), tests/test_engines_pallas.py
(``test_flat_kernel_engine_equals_the_reference``, ``test_kernels_equal_collide_then_stream``).
"""

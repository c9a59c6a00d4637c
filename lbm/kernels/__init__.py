"""Pure jax.numpy kernels, one module per concern; arrays in, arrays out.

Shapes: populations ``f`` are ``(Q, *grid)``; density ``rho`` is ``grid``;
velocity ``u`` is ``(D, *grid)``. Lattice constants are static Python/numpy data.
"""

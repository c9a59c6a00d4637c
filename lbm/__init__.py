"""lbm: an instrumented lattice Boltzmann flow simulator on JAX."""

__version__ = "0.1.0"

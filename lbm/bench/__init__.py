"""Benchmarks: memory-bandwidth roofline, throughput, comparisons."""

DEFAULT_COLLISION = "bgk"
"""The collision a benchmark measures unless told (the bench config's default, the naive step's only one, and what a
record without a ``collision`` field measured): policy, written once here."""

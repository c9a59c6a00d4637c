"""Benchmarks: memory-bandwidth roofline, throughput, comparisons."""

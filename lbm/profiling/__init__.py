"""Profiling mode: jax.profiler traces turned into a per-stage timing breakdown.

``capture`` records the trace during a run, ``tracedb`` loads trace files into tables that
follow Perfetto's trace-processor schema (embedded SQLite or Perfetto's TraceProcessor),
``queries`` holds every SQL text, ``breakdown`` turns query results into per-stage figures,
``compile_report`` writes jaxpr/HLO/cost analysis per stage, ``report`` and ``plots`` write
the tables and pictures, and ``analyze`` is ``python -m lbm analyze``.
"""

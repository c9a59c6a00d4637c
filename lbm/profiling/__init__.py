"""Profiling mode: jax.profiler traces turned into a per-stage timing breakdown.

One pipeline, trace → SQL tables → breakdown → reports (``pipeline.analyse``), used by
``capture`` (the ``Profiler`` a profiled run drives) and by ``analyze`` (``python -m lbm analyze``
on a trace or run directory after the fact). ``tracedb`` loads trace files into tables that
follow Perfetto's trace-processor schema (embedded SQLite or Perfetto's TraceProcessor),
``queries`` holds every SQL text, ``breakdown`` turns query results into per-stage figures,
``compile_report`` writes the texts of the programs the engine runs (given as data) and the
kernel → stage map read from them by :mod:`lbm.hlo`, ``report`` and ``plots`` write the
tables and pictures, ``sweep`` the table of a multirun. It imports no case, engine or bench
code: stage names, programs, compile times and the bandwidth come in as arguments.
"""

"""Every SQL text the profiler runs, in one place.

The same text runs on both backends (embedded SQLite and Perfetto's TraceProcessor): it
only uses the tables and columns of Perfetto's schema that :mod:`lbm.profiling.tracedb`
recreates (``slice``, ``thread_track``, ``thread``, ``process``, ``args``) and the
``EXTRACT_ARG`` function, which SQLite gets as a registered Python function. Timestamps and
durations are integer nanoseconds, as in Perfetto.
"""

from __future__ import annotations

from collections.abc import Iterable

# Slices with thread and process names: the building block of the other queries.
_SLICE_THREAD = """
FROM slice AS s
JOIN thread_track AS tt ON s.track_id = tt.id
JOIN thread AS th ON tt.utid = th.utid
LEFT JOIN process AS p ON th.upid = p.upid
"""

THREADS = """
SELECT th.utid AS utid, th.tid AS tid, th.name AS thread_name, p.pid AS pid, p.name AS process_name,
       COUNT(s.id) AS slices
FROM thread AS th
LEFT JOIN process AS p ON th.upid = p.upid
LEFT JOIN thread_track AS tt ON tt.utid = th.utid
LEFT JOIN slice AS s ON s.track_id = tt.id
GROUP BY th.utid
ORDER BY slices DESC
"""
"""Threads (tracks) of the trace with their process and number of slices."""

NAMED_SLICES = """
SELECT s.id AS id, s.ts AS ts, s.dur AS dur, s.name AS name, s.depth AS depth, s.track_id AS track_id,
       th.tid AS tid, th.name AS thread_name, p.name AS process_name,
       EXTRACT_ARG(s.arg_set_id, 'args.step_num') AS step_num, EXTRACT_ARG(s.arg_set_id, 'args.steps') AS steps
""" + _SLICE_THREAD + """
WHERE s.name IN ({names})
ORDER BY s.ts, s.depth
"""
"""Host annotation spans with the given names (stages, ``timestep``, window markers), in time order; ``steps``:
the timesteps a fused chunk's span covers."""

DEVICE_EVENTS = """
SELECT s.id AS id, s.ts AS ts, s.dur AS dur, s.name AS name, s.track_id AS track_id,
       th.name AS thread_name, p.name AS process_name,
       EXTRACT_ARG(s.arg_set_id, 'args.hlo_module') AS hlo_module,
       EXTRACT_ARG(s.arg_set_id, 'args.hlo_op') AS hlo_op,
       EXTRACT_ARG(s.arg_set_id, 'args.run_id') AS run_id,
       EXTRACT_ARG(s.arg_set_id, 'args.correlation_id') AS correlation_id,
       EXTRACT_ARG(s.arg_set_id, 'args.tf_op') AS tf_op
""" + _SLICE_THREAD + """
WHERE EXTRACT_ARG(s.arg_set_id, 'args.hlo_op') IS NOT NULL
ORDER BY s.ts
"""
"""XLA execution events (CPU thunks, GPU/TPU kernels): every slice that carries an ``hlo_op`` argument."""

DEVICE_OPS_LINE = "XLA Ops"
DEVICE_MODULES_LINE = "XLA Modules"
"""A TPU's device timelines: one event per HLO op run (named by the op, with ``tf_op``, ``source``,
``hlo_category``, ``bytes_accessed``, ``model_flops`` as arguments) and one per program run (``run_id``)."""

XLA_OPS = """
SELECT s.id AS id, s.ts AS ts, s.dur AS dur, s.name AS hlo_op, s.track_id AS track_id,
       th.name AS thread_name, p.name AS process_name,
       EXTRACT_ARG(s.arg_set_id, 'args.tf_op') AS tf_op,
       EXTRACT_ARG(s.arg_set_id, 'args.source') AS source,
       EXTRACT_ARG(s.arg_set_id, 'args.hlo_category') AS hlo_category,
       EXTRACT_ARG(s.arg_set_id, 'args.bytes_accessed') AS bytes_accessed,
       EXTRACT_ARG(s.arg_set_id, 'args.model_flops') AS model_flops
""" + _SLICE_THREAD + """
WHERE th.name = '""" + DEVICE_OPS_LINE + """' AND p.name LIKE '/device:%'
ORDER BY s.ts
"""
"""A TPU's op events (the device's ``XLA Ops`` line): the op's name is the event's name, not an argument."""

XLA_MODULES = """
SELECT s.id AS id, s.ts AS ts, s.dur AS dur, s.name AS name, th.name AS thread_name, p.name AS process_name,
       EXTRACT_ARG(s.arg_set_id, 'args.run_id') AS run_id
""" + _SLICE_THREAD + """
WHERE th.name = '""" + DEVICE_MODULES_LINE + """' AND p.name LIKE '/device:%'
ORDER BY s.ts
"""
"""A TPU's program runs (the device's ``XLA Modules`` line): ``jit_<name>(<program id>)``, with a run_id."""

SLICE_STATS = """
SELECT s.name AS name, COUNT(*) AS calls, SUM(s.dur) AS total_ns, MIN(s.dur) AS min_ns, MAX(s.dur) AS max_ns,
       AVG(s.dur) AS mean_ns
""" + _SLICE_THREAD + """
WHERE s.name IN ({names})
GROUP BY s.name
ORDER BY total_ns DESC
"""
"""Count, total, min, max and mean duration (ns) per slice name, over the whole trace."""

def sql_literal(value: str) -> str:
    """A SQL string literal (single quotes doubled)."""
    return "'" + str(value).replace("'", "''") + "'"


def name_list(names: Iterable[str]) -> str:
    """A comma-separated list of SQL string literals for ``IN (...)``."""
    items = [sql_literal(n) for n in names]
    return ", ".join(items) if items else "NULL"


def named_slices(names: Iterable[str]) -> str:
    """The NAMED_SLICES query for these names."""
    return NAMED_SLICES.format(names=name_list(names))


def slice_stats(names: Iterable[str]) -> str:
    """The SLICE_STATS query for these names."""
    return SLICE_STATS.format(names=name_list(names))

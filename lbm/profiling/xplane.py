"""A reader of XPlane protobufs (``*.xplane.pb``, what ``jax.profiler`` writes beside the trace JSON), in pure Python.

The file is an ``XSpace`` message of tsl/profiler/protobuf/xplane.proto: planes (a device or the host), each with
lines (a thread, or a device timeline such as a TPU's ``XLA Ops`` and ``XLA Modules``), each with events; an event
names its metadata (``XEventMetadata``: name, display name, stats such as ``tf_op``, ``source``, ``hlo_category``)
and carries stats of its own (``run_id``, ``device_duration_ps``, ...). The events come out as the trace viewer
shows them: named by the display name where there is one (``fusion.3``, not its HLO text, which becomes
``long_name``), with the metadata's stats and then the event's own. ``jax.profiler.ProfileData`` gives neither the
display names nor the metadata stats, where a TPU keeps the named scope (``tf_op``) of every op.

Only the protobuf wire format is needed (varints, 64-bit words, length-delimited fields): no protobuf package.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

# Field numbers of xplane.proto.
SPACE_PLANES = 1
PLANE_ID, PLANE_NAME, PLANE_LINES, PLANE_EVENT_METADATA, PLANE_STAT_METADATA, PLANE_STATS = 1, 2, 3, 4, 5, 6
LINE_ID, LINE_NAME, LINE_TIMESTAMP_NS, LINE_EVENTS, LINE_DISPLAY_NAME = 1, 2, 3, 4, 11
EVENT_METADATA_ID, EVENT_OFFSET_PS, EVENT_DURATION_PS, EVENT_STATS = 1, 2, 3, 4
STAT_METADATA_ID, STAT_DOUBLE, STAT_UINT64, STAT_INT64, STAT_STR, STAT_BYTES, STAT_REF = 1, 2, 3, 4, 5, 6, 7
EVENT_META_ID, EVENT_META_NAME, EVENT_META_DISPLAY_NAME, EVENT_META_STATS = 1, 2, 4, 5
STAT_META_ID, STAT_META_NAME = 1, 2

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5


class XPlaneError(ValueError):
    """The bytes are not an XSpace protobuf (truncated, or another format)."""


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise XPlaneError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise XPlaneError("varint longer than 10 bytes")


def fields(buf: bytes) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value) of each field of one message: an int for varints and fixed words, bytes for
    length-delimited fields."""
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise XPlaneError("field number 0")
        if wire == _VARINT:
            value, pos = _varint(buf, pos)
        elif wire == _I64:
            if pos + 8 > end:
                raise XPlaneError("truncated 64-bit field")
            value, pos = int.from_bytes(buf[pos:pos + 8], "little"), pos + 8
        elif wire == _LEN:
            size, pos = _varint(buf, pos)
            if pos + size > end:
                raise XPlaneError("truncated length-delimited field")
            value, pos = buf[pos:pos + size], pos + size
        elif wire == _I32:
            if pos + 4 > end:
                raise XPlaneError("truncated 32-bit field")
            value, pos = int.from_bytes(buf[pos:pos + 4], "little"), pos + 4
        else:
            raise XPlaneError(f"wire type {wire} (groups are not used by xplane.proto)")
        yield number, wire, value


def _signed(v: int) -> int:
    """An int64 field's value (varints hold two's complement in 64 bits)."""
    return v - (1 << 64) if v >= 1 << 63 else v


def _text(b: bytes) -> str:
    return b.decode("utf-8", errors="replace")


@dataclass
class XEvent:
    """One event: its name (display name where there is one), start and duration (ns), and stats."""

    name: str
    start_ns: float
    duration_ns: float
    stats: dict[str, Any]


@dataclass
class XLine:
    """One line (a thread or a device timeline) and its events."""

    name: str
    events: list[XEvent] = field(default_factory=list)


@dataclass
class XPlaneData:
    """One plane (a device, the host, metadata), its lines and its own stats."""

    name: str
    lines: list[XLine] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)


def _stat(buf: bytes, stat_names: dict[int, str]) -> tuple[str, Any] | None:
    """(name, value) of an XStat; None for bytes values (opaque: the trace viewer shows none of them either).
    uint64 values stay unsigned Python ints (program ids pass 2**63)."""
    name, value, seen = "", None, False
    for number, wire, v in fields(buf):
        if number == STAT_METADATA_ID:
            name = stat_names.get(v, str(v))
        elif number == STAT_DOUBLE and wire == _I64:
            value, seen = struct.unpack("<d", v.to_bytes(8, "little"))[0], True
        elif number == STAT_UINT64:
            value, seen = v, True
        elif number == STAT_INT64:
            value, seen = _signed(v), True
        elif number == STAT_STR:
            value, seen = _text(v), True
        elif number == STAT_REF:
            value, seen = stat_names.get(v, str(v)), True
        elif number == STAT_BYTES:
            return None
    return (name, value) if seen else None


def _map_entry(buf: bytes) -> bytes | None:
    """The value (field 2) of a protobuf map entry."""
    return next((v for n, w, v in fields(buf) if n == 2 and w == _LEN), None)


def _same(v: Any) -> Any:
    """A field's value as read (an id's varint)."""
    return v


def _message(buf: bytes, decode: dict[int, Callable[[Any], Any]], stats_field: int | None = None,
             stat_names: dict[int, str] | None = None) -> tuple[dict[int, Any], dict[str, Any]]:
    """The fields of a message named in ``decode``, each decoded (the last one of a number wins), and the stats
    in its repeated field ``stats_field`` by name (``stat_names``: the plane's stat metadata)."""
    values: dict[int, Any] = {}
    stats: dict[str, Any] = {}
    for n, _, x in fields(buf):
        if n == stats_field:
            st = _stat(x, stat_names or {})
            if st is not None:
                stats[st[0]] = st[1]
        elif n in decode:
            values[n] = decode[n](x)
    return values, stats


def _plane(buf: bytes) -> XPlaneData:
    name = ""
    lines_raw: list[bytes] = []
    event_meta_raw: list[bytes] = []
    stat_names: dict[int, str] = {}
    stats_raw: list[bytes] = []
    for number, wire, v in fields(buf):
        if number == PLANE_NAME and wire == _LEN:
            name = _text(v)
        elif number == PLANE_LINES:
            lines_raw.append(v)
        elif number == PLANE_EVENT_METADATA:
            entry = _map_entry(v)
            if entry is not None:
                event_meta_raw.append(entry)
        elif number == PLANE_STAT_METADATA:
            entry = _map_entry(v)
            if entry is not None:
                values, _ = _message(entry, {STAT_META_ID: _same, STAT_META_NAME: _text})
                stat_names[values.get(STAT_META_ID, 0)] = values.get(STAT_META_NAME, "")
        elif number == PLANE_STATS:
            stats_raw.append(v)
    metadata: dict[int, tuple[str, dict[str, Any]]] = {}
    for raw in event_meta_raw:
        values, mstats = _message(raw, {EVENT_META_ID: _same, EVENT_META_NAME: _text, EVENT_META_DISPLAY_NAME: _text},
                                  EVENT_META_STATS, stat_names)
        mid, mname = values.get(EVENT_META_ID, 0), values.get(EVENT_META_NAME, "")
        display = values.get(EVENT_META_DISPLAY_NAME, "")
        if display and display != mname:
            mstats = {"long_name": mname, **mstats}
        metadata[mid] = (display or mname, mstats)
    plane = XPlaneData(name)
    for raw in stats_raw:
        st = _stat(raw, stat_names)
        if st is not None:
            plane.stats[st[0]] = st[1]
    for raw in lines_raw:
        plane.lines.append(_line(raw, metadata, stat_names))
    return plane


def _line(buf: bytes, metadata: dict[int, tuple[str, dict[str, Any]]], stat_names: dict[int, str]) -> XLine:
    name = display = ""
    timestamp_ns = 0
    events_raw: list[bytes] = []
    for number, wire, v in fields(buf):
        if number == LINE_NAME and wire == _LEN:
            name = _text(v)
        elif number == LINE_DISPLAY_NAME and wire == _LEN:
            display = _text(v)
        elif number == LINE_TIMESTAMP_NS:
            timestamp_ns = _signed(v)
        elif number == LINE_EVENTS:
            events_raw.append(v)
    line = XLine(display or name)
    for raw in events_raw:
        values, own = _message(raw, {EVENT_METADATA_ID: _same, EVENT_OFFSET_PS: _signed, EVENT_DURATION_PS: _signed},
                               EVENT_STATS, stat_names)
        mid, offset_ps, duration_ps = (values.get(k, 0) for k in (EVENT_METADATA_ID, EVENT_OFFSET_PS, EVENT_DURATION_PS))
        ev_name, meta_stats = metadata.get(mid, (str(mid), {}))
        line.events.append(XEvent(ev_name, timestamp_ns + offset_ps / 1000.0, duration_ps / 1000.0,
                                  {**meta_stats, **own}))
    return line


def read_xspace(data: bytes) -> list[XPlaneData]:
    """The planes of an XSpace protobuf's bytes; XPlaneError when they are not one."""
    planes = [_plane(v) for n, w, v in fields(data) if n == SPACE_PLANES and w == _LEN]
    if not planes:
        raise XPlaneError("no planes")
    return planes

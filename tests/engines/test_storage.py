"""16-bit storage, exhaustively: every float16 bit pattern through the engines' conversions (bfloat16 is refused:
tests/simulation/test_deviations.py).

Three places convert: XLA's ``convert`` (the xla engine's ``encode``/``decode`` in lbm/engines/base.py),
the engines' storage of the deviations f - w built on it, and the native kernel's own integer conversions
(``LD``/``ST`` in lbm/engines/native/kernels.cc under LBM_STORAGE_FLOAT16). Each is compared
with numpy / ml_dtypes bit for bit (a NaN only has to stay a NaN). Narrowing is checked on every
representable value, every midpoint between neighbours (the ties: round to nearest even), each midpoint
one float32 ulp either side, and random float32 bit patterns.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from lbm.engines.base import decode, encode
from lbm.lattice import D2Q9

DTYPES = {"float16": np.dtype(np.float16)}
ALL = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
"""Every 16-bit pattern."""
TINY = np.float32(np.finfo(np.float32).tiny)


def patterns(storage: str) -> np.ndarray:
    """All 65536 values of the storage type."""
    return ALL.view(DTYPES[storage])


def same(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Elementwise: equal bit patterns, or both NaN (NaN payloads and signs may differ)."""
    got, ref = np.asarray(got), np.asarray(ref)
    nan_g, nan_r = np.isnan(got.astype(np.float32)), np.isnan(ref.astype(np.float32))
    bits = got.view(f"u{got.dtype.itemsize}") == ref.view(f"u{ref.dtype.itemsize}")
    return np.where(nan_r, nan_g, bits & ~nan_g)


def assert_same(got: np.ndarray, ref: np.ndarray, what: str, inputs: np.ndarray | None = None) -> None:
    """Fail with the first differing elements."""
    ok = same(got, ref)
    if not ok.all():
        idx = np.flatnonzero(~ok)[:5]
        shown = [(None if inputs is None else float(inputs.reshape(-1)[i]), float(np.asarray(got).reshape(-1)[i]),
                  float(np.asarray(ref).reshape(-1)[i])) for i in idx]
        pytest.fail(f"{what}: {(~ok).sum()} of {ok.size} differ; first (input, got, expected): {shown}")


def narrowing_probes(storage: str, n_random: int, seed: int = 0) -> np.ndarray:
    """float32 values that decide a conversion to ``storage``: every value, the ties between neighbours and
    one float32 ulp either side of each tie, both signs, infinities, then ``n_random`` random bit patterns."""
    dt = DTYPES[storage]
    finfo = ml_dtypes.finfo(dt)
    with np.errstate(invalid="ignore"):  # NaN patterns
        v = patterns(storage).astype(np.float64)
    pos = np.sort(v[np.isfinite(v) & (v >= 0) & ~np.signbit(v)])  # 0 .. max finite
    step = np.diff(pos)
    ties = np.concatenate([pos[:-1] + step / 2, [float(finfo.max) + step[-1] / 2]])  # the last one: the overflow edge
    ties = ties.astype(np.float32)
    assert np.all(ties.astype(np.float64) == np.concatenate([pos[:-1] + step / 2, [float(finfo.max) + step[-1] / 2]]))
    near = np.concatenate([ties, np.nextafter(ties, np.float32(np.inf)), np.nextafter(ties, np.float32(0))])
    vals = np.concatenate([pos.astype(np.float32), near, [np.inf, np.nan, TINY, TINY / 2]]).astype(np.float32)
    rnd = np.random.default_rng(seed).integers(0, 1 << 32, n_random, dtype=np.uint64).astype(np.uint32).view(np.float32)
    return np.concatenate([vals, -vals, rnd])


def xla_flushes_denormals() -> bool:
    """Whether XLA's CPU arithmetic flushes float32 denormals to zero (it runs with FTZ/DAZ set)."""
    x = np.array([TINY / 4], np.float32)
    return float(jax.jit(jnp.add)(x, np.zeros(1, np.float32))[0]) == 0.0


def flushed(x: np.ndarray) -> np.ndarray:
    """float32 denormals as signed zeros (what FTZ/DAZ arithmetic sees and produces)."""
    return np.where((np.abs(x) < TINY) & (x != 0), np.copysign(np.float32(0), x), x).astype(np.float32)


@pytest.mark.parametrize("storage", DTYPES)
def test_xla_convert_is_exact_on_every_pattern(storage: str) -> None:
    """XLA widens all 65536 patterns as ml_dtypes does, narrows every tie and edge as it does, and
    narrowing a widened pattern gives the pattern back (the conversions ``encode``/``decode`` apply)."""
    dt = DTYPES[storage]
    x = patterns(storage)
    wide = np.asarray(jax.jit(lambda a: a.astype(jnp.float32))(x))
    assert_same(wide, x.astype(np.float32), f"{storage} -> float32", x)
    back = np.asarray(jax.jit(lambda a: a.astype(dt))(wide))
    assert_same(back, x, f"{storage} -> float32 -> {storage}", x)
    probes = narrowing_probes(storage, 1 << 20)
    with np.errstate(over="ignore", invalid="ignore"):
        ref = probes.astype(dt)
    assert_same(np.asarray(jax.jit(lambda a: a.astype(dt))(probes)), ref, f"float32 -> {storage}", probes)


@pytest.mark.parametrize("storage", DTYPES)
def test_engine_storage_round_trip(storage: str) -> None:
    """The engines' storage holds the deviations f - w themselves: decode widens every pattern as numpy does,
    and encode(decode(s)) gives every pattern back bit for bit (-0 included; a NaN stays a NaN)."""
    s = patterns(storage)
    f = np.asarray(jax.jit(lambda a: decode(a, storage, jnp.float32))(s))
    assert_same(f, s.astype(np.float32), f"decode({storage})", s)
    again = np.asarray(jax.jit(lambda a: encode(a, storage))(f))
    assert_same(again, s, f"encode(decode({storage}))", s)


def crafted_walls(n_outer: int, n_inner: int, src: np.ndarray, dst: np.ndarray, add: np.ndarray) -> dict:
    """Wall records that skip every cell (the bulk pass does nothing) and only copy ``a[dst] = a[src] + add``."""
    m = len(dst)
    per = -(-m // n_outer)
    i32 = np.int32
    return {"skip_off": np.arange(n_outer + 1, dtype=i32), "skip": np.tile(np.array([0, n_inner], i32), n_outer),
            "rest_off": np.zeros(n_outer + 1, i32), "rest": np.zeros(0, i32),
            "copy_off": np.minimum(np.arange(n_outer + 1) * per, m).astype(i32), "copy_dst": dst.astype(i32),
            "copy_src": src.astype(i32), "copy_add": add.astype(np.float32),
            "keep_off": np.zeros(n_outer + 1, i32), "keep_src": np.zeros(0, i32), "keep_dst": np.zeros(0, i32)}


@pytest.mark.native
@pytest.mark.slow  # 5.0 CPU-s, most of it building a float16 kernel; the fast lane: the xla conversions (above)
@pytest.mark.parametrize("storage", DTYPES)
def test_native_kernel_conversions_are_exact_on_every_pattern(storage: str) -> None:
    """The kernel's own conversions, through its half-way wall copy ``ST(a[d], LD(a[s]) + add)`` (every cell
    skipped, so the step does nothing else), against numpy / ml_dtypes:
    - every pattern x with add = -0 (x + -0 = x): ST(LD(x)) gives x back;
    - every finite x with add = +-half its spacing: a tie that rounds to even only if LD(x) is exact;
    - from the pattern -0, every narrowing probe y (-0 + y = y): ST(y) is numpy's rounding.
    The kernel runs inside XLA, whose CPU arithmetic flushes float32 denormals (FTZ/DAZ; measured here): the
    reference flushes them too (only denormal probes are affected).
    """
    from lbm.engines.native import build
    from lbm.engines.native.codegen import KernelSpec

    dt = DTYPES[storage]
    x = patterns(storage)
    with np.errstate(over="ignore", invalid="ignore"):
        x32 = x.astype(np.float32)
        half = np.where(np.isfinite(x32), np.spacing(np.abs(x)).astype(np.float32) / 2, 0).astype(np.float32)
    every = np.arange(1 << 16)
    nx, ny = 128, 1024  # 9 planes of 2**17 cells: plane 0 holds the patterns, the rest the results
    plane = nx * ny
    room = (D2Q9.q - 1) * plane
    n_rt = 3 * (1 << 16)
    probes = narrowing_probes(storage, room - n_rt - len(narrowing_probes(storage, 0)))  # fills every plane
    neg_zero = 0x8000
    src = np.concatenate([every, every, every, np.full(len(probes), neg_zero)])
    add = np.concatenate([np.full(1 << 16, -0.0, np.float32), half, -half, probes]).astype(np.float32)
    dst = plane + np.arange(len(add))
    a = np.zeros(D2Q9.q * plane, np.uint16)
    a[: 1 << 16] = ALL
    spec = KernelSpec(D2Q9, storage, False, False)
    out, _, _ = build.aa_step(spec, jnp.asarray(a.view(dt).reshape(D2Q9.q, nx, ny)), 0, 1.0, 1.0,
                              walls=crafted_walls(nx, ny, src, dst, add))
    got = np.asarray(out).reshape(-1)
    lhs = x32[src]
    flush = flushed if xla_flushes_denormals() else (lambda v: v)
    with np.errstate(over="ignore", invalid="ignore"):
        summed = lhs + add
        ref = flush(flush(lhs) + flush(add)).astype(dt)
    assert_same(got[dst], ref, f"native {storage}: ST(LD(a[s]) + add)", summed)
    assert np.all(got[: 1 << 16].view(np.uint16) == ALL)  # the source plane is untouched
    assert_same(got[dst[: 1 << 16]][np.abs(x32) >= TINY], x[np.abs(x32) >= TINY], f"native {storage} round trip")

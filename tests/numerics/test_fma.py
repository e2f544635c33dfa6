"""Tests of jaxwarp._src.numerics.fma against exact rational arithmetic, and of its native
form against its integer one."""

import doctest
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxwarp._src.numerics import fma
from jaxwarp._src.numerics.fma import fma64, fma64_native


def _fma_ref(a, b, c):
    fa, fb, fc = (float(v) for v in (a, b, c))
    if not all(np.isfinite([fa, fb, fc])):
        return None
    exact = Fraction(fa) * Fraction(fb) + Fraction(fc)
    if exact == 0:
        p_neg = np.signbit(fa) != np.signbit(fb)
        zero_neg = (p_neg and np.signbit(fc)) if (fa * fb == 0) else False
        return np.float64(-0.0 if zero_neg else 0.0)
    return np.float64(float(exact))  # correctly rounded, ties to even


def test_fma64_matches_exact_rounding():
    rng = np.random.default_rng(4)
    n = 600
    a = rng.standard_normal(n) * 2.0 ** rng.integers(-60, 60, n)
    b = rng.standard_normal(n) * 2.0 ** rng.integers(-60, 60, n)
    c = -a * b * (1 + rng.standard_normal(n) * 2.0 ** -rng.integers(1, 60, n))
    c[::7] = rng.standard_normal(n)[::7]
    a[:4], b[:4], c[:4] = [2.0**-600, 0.0, 1e200, 5e-324], [2.0**-500, -0.0, 1e100, 0.5], \
        [0.0, -0.0, 1.0, 0.0]
    with jax.enable_x64(True):
        u = lambda v: jnp.asarray(np.asarray(v, np.float64).view(np.uint64))  # noqa: E731
        got = np.asarray(jax.jit(fma64)(u(a), u(b), u(c))).view(np.float64)
    for i in range(n):
        want = _fma_ref(a[i], b[i], c[i])
        assert want is not None
        assert got[i].view(np.uint64) == np.float64(want).view(np.uint64), (i, a[i], b[i], c[i])


def _native_cases(rng, n):
    """Operands over the whole float64 range, with cancellations, exact ties and specials."""
    def r(lo, hi):
        return np.ldexp(1 + rng.random(n), rng.integers(lo, hi, n)) * rng.choice([-1, 1], n)
    a, b = r(-1030, 1024), r(-1030, 1024)
    with np.errstate(all="ignore"):
        ab = a * b
        near = -ab * (1 + r(-60, -1))  # cancellation
    c = np.where(rng.random(n) < 0.5, r(-1080, 1024), near)
    # short significands: products with ties and exact sums
    short = rng.random(n) < 0.25
    a = np.where(short, np.ldexp(rng.integers(1 << 26, 1 << 27, n).astype(float),
                                 rng.integers(-300, 300, n)), a)
    b = np.where(short, np.ldexp(rng.integers(1 << 26, 1 << 27, n).astype(float),
                                 rng.integers(-300, 300, n)), b)
    c = np.where(short, np.ldexp(rng.integers(-(1 << 20), 1 << 20, n).astype(float),
                                 rng.integers(-700, 700, n)), c)
    edge = np.array([0.0, -0.0, 5e-324, -1e-310, 2.0**-1022, 2.0**-960, 2.0**-961, 2.0**-450,
                     2.0**-451, 2.0**990, 2.0**991, 2.0**1000, 2.0**1001, np.inf, -np.inf,
                     np.nan, 1.0, -1.0, 1 + 2**-52, 3.0, 1e300, -1e-300])
    ea, eb, ec = (x.ravel() for x in np.meshgrid(edge, edge, edge, indexing="ij"))
    return np.concatenate([a, ea]), np.concatenate([b, eb]), np.concatenate([c, ec])


def test_fma64_native_equals_fma64_in_its_range():
    # fma64_native (native float64 operations) against fma64 (integer emulation, checked
    # against exact rationals above), bit for bit wherever its operands and result are in
    # range; the CPU backend flushes subnormals, which the ranges keep away from every
    # intermediate.
    a, b, c = _native_cases(np.random.default_rng(11), 1 << 18)
    with jax.enable_x64(True):
        u = lambda v: jnp.asarray(v.view(np.uint64))  # noqa: E731
        want = np.asarray(jax.jit(fma64)(u(a), u(b), u(c)))

        def native(a, b, c):
            d = fma64_native(a, b, c)
            return d, (fma.native_operand_ok(a) & fma.native_operand_ok(b)
                       & fma.native_acc_ok(c) & fma.native_result_ok(d))
        got, ok = jax.jit(native)(jnp.asarray(a), jnp.asarray(b), jnp.asarray(c))
    got, ok = np.asarray(got).view(np.uint64), np.asarray(ok)
    bad = np.nonzero(ok & (got != want))[0]
    assert bad.size == 0, [(a[i], b[i], c[i]) for i in bad[:5]]
    assert ok.mean() > 0.3  # the native form covers a good part of these operands
    # and its ranges leave out NaN, infinities and subnormals
    with jax.enable_x64(True):
        x = jnp.asarray([np.nan, np.inf, 5e-324, 0.0, -0.0, 1.0])
        assert np.asarray(fma.native_operand_ok(x)).tolist() == [False] * 3 + [True] * 3
        assert np.asarray(fma.native_acc_ok(x)).tolist() == [False] * 3 + [True] * 3


# Slow: the same examples run by default in tests/test_docs.py::test_docstring_example.
@pytest.mark.slow
def test_doctests():
    assert doctest.testmod(fma).failed == 0

"""Shared-memory operands of ``wgmma`` and ``tcgen05.mma``: descriptors, layouts, bytes.

Both instructions read A and B tiles out of shared memory through a 64-bit descriptor
whose start address, leading / stride byte offsets (LBO / SBO) and swizzle mode say where
every element is, in the canonical layouts of the PTX ISA ("Shared Memory Matrix Layout"
of wgmma, "Shared memory descriptor" and "Major-ness supported by strides" of tcgen05):
a *core matrix* is 8 rows x 16 bytes, K-major or M/N-major, with a 32/64/128-byte swizzle
(:func:`layout_addresses`). The two descriptors share the address fields and differ in
the rest:

=====================  ==================================  ============================
bits                   wgmma "matrix descriptor"           tcgen05 "shared memory
                       (:func:`make_descriptor`)           descriptor"
                                                           (:func:`make_smem_descriptor`)
=====================  ==================================  ============================
0-13, 16-29, 32-45     start address, LBO, SBO, each ``(x & 0x3FFFF) >> 4``
46-48                  (unused)                            fixed 0b001 (version)
49-51                  matrix base offset                  matrix base offset
52                     (unused)                            LBO mode (1: absolute
                                                           address; sm_103a, 48-byte K)
61-63 / 62-63          swizzle, 2 bits at 62: 0 none,      swizzle, 3 bits at 61: 0
                       1 128B, 2 64B, 3 32B                none, 1 128B with 32-byte
                                                           atoms, 2 128B, 4 64B, 6 32B
=====================  ==================================  ============================

Reading is exact: whatever the fields say is what is read, as on the GPU; an address
beyond the given shared memory is a ``ValueError``. Shared memory is a ``(..., nbytes)``
uint8 array (byte address = index).

Example:
    >>> d = make_smem_descriptor(1024, 16, 1024, swizzle=128)
    >>> hex(d), decode_smem_descriptor(d).swizzle
    ('0x4000404000010040', 128)
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxwarp._src import checks
from jaxwarp._src.numerics import bitops

__all__ = [
    "DescriptorFields", "SmemDescriptorFields", "decode_descriptor",
    "decode_smem_descriptor", "layout_addresses", "make_descriptor",
    "make_smem_descriptor", "operand_addresses",
]

_ADDR_LIMIT = 1 << 18  # the 14-bit fields hold (x & 0x3FFFF) >> 4
_ADDRESS_FIELDS = ("start_address", "leading_byte_offset", "stride_byte_offset")

# --------------------------------------------------------------------------------------
# wgmma matrix descriptors (PTX ISA, "Matrix Descriptor Format").

#: swizzle width in bytes -> the 2-bit mode of wgmma descriptor bits 62-63.
SWIZZLE_MODE: Mapping[int, int] = MappingProxyType({0: 0, 128: 1, 64: 2, 32: 3})
_SWIZZLE_BYTES = {v: k for k, v in SWIZZLE_MODE.items()}


class DescriptorFields(NamedTuple):
    """The fields of a wgmma matrix descriptor, in bytes.

    Attributes:
      start_address: shared-memory byte address of the operand (bits 0-13, >> 4).
      leading_byte_offset: LBO (bits 16-29, >> 4).
      stride_byte_offset: SBO (bits 32-45, >> 4).
      base_offset: matrix base offset (bits 49-51).
      swizzle: swizzle width in bytes, 0 (none), 32, 64 or 128 (bits 62-63).
    """

    start_address: int
    leading_byte_offset: int
    stride_byte_offset: int
    base_offset: int
    swizzle: int


def _static_nonneg(value: Any, name: str) -> int:
    v = checks.static_int(value, name)
    if v < 0:
        raise ValueError(f"{name}={v} must be >= 0")
    return v


def _address_fields(start_address, leading_byte_offset, stride_byte_offset) -> int:
    """Bits 0-13, 16-29 and 32-45 of either descriptor, each field checked by name."""
    values = (start_address, leading_byte_offset, stride_byte_offset)
    d = 0
    for name, value, at in zip(_ADDRESS_FIELDS, values, (0, 16, 32), strict=True):
        v = _static_nonneg(value, name)
        if v % 16:
            raise ValueError(f"{name}={v} must be a multiple of 16 (the descriptor keeps "
                             f"bits 4..17)")
        if v >= _ADDR_LIMIT:
            raise ValueError(f"{name}={v} does not fit the 14-bit field; allowed: 0 .. "
                             f"{_ADDR_LIMIT - 16} in steps of 16")
        d |= (v >> 4) << at
    return d


def _base_offset(base_offset: Any) -> int:
    bo = checks.static_int(base_offset, "base_offset")
    checks.static_choice(bo, "base_offset", tuple(range(8)))
    return bo


def make_descriptor(start_address: int, leading_byte_offset: int, stride_byte_offset: int,
                    swizzle: int = 0, base_offset: int = 0) -> np.uint64:
    """Encodes a 64-bit wgmma matrix descriptor.

    Bit fields (PTX ISA, "Matrix Descriptor Format")::

        bits  0-13  start address >> 4          bits 32-45  stride byte offset >> 4
        bits 16-29  leading byte offset >> 4    bits 49-51  matrix base offset
        bits 62-63  swizzle mode: 0 none, 1 128-byte, 2 64-byte, 3 32-byte

    Args:
      start_address: shared-memory byte address, a multiple of 16 below 2**18.
      leading_byte_offset: LBO in bytes, a multiple of 16 below 2**18. K-major without
        swizzle: the distance between the two 16-byte K halves of a core-matrix row
        group; M/N-major: see ``operand_addresses``. Unused (any value) for K-major
        swizzled operands.
      stride_byte_offset: SBO in bytes, a multiple of 16 below 2**18.
      swizzle: the swizzle width in bytes: 0 (none), 32, 64 or 128.
      base_offset: 0..7 (the ISA's base offset for patterns that do not start on their
        repeat boundary; only 0 is modelled when reading).

    Returns:
      The descriptor as ``numpy.uint64``.

    Raises:
      ValueError/TypeError: a field that is not a static int, not 16-byte aligned, or out
        of range (the message names it).

    Example:
      >>> hex(make_descriptor(0, 128, 256))
      '0x1000080000'
      >>> hex(make_descriptor(1024, 16, 1024, swizzle=128))
      '0x4000004000010040'
    """
    d = _address_fields(start_address, leading_byte_offset, stride_byte_offset)
    sw = checks.static_int(swizzle, "swizzle")
    checks.static_choice(sw, "swizzle", tuple(sorted(SWIZZLE_MODE)))
    return np.uint64(d | _base_offset(base_offset) << 49 | SWIZZLE_MODE[sw] << 62)


def _descriptor_bits(desc: Any) -> int:
    """A concrete 64-bit descriptor as a Python int (int64 values: two's complement)."""
    if isinstance(desc, jax.core.Tracer):
        raise TypeError("the descriptor is a static argument and must be a concrete Python "
                        "int or numpy integer, not a traced value")
    if isinstance(desc, (np.ndarray, jax.Array)) and np.ndim(desc) == 0:
        desc = np.asarray(desc)[()]
    if isinstance(desc, bool) or not isinstance(desc, (int, np.integer)):
        raise TypeError(f"descriptor must be a Python int or numpy integer (64 bits), got "
                        f"{type(desc).__name__} {desc!r}")
    d = int(desc)
    if isinstance(desc, np.signedinteger) and d < 0:
        d &= (1 << 64) - 1
    if not 0 <= d < 1 << 64:
        raise ValueError(f"descriptor={d:#x} does not fit in 64 bits")
    return d


def _addresses_of(d: int) -> tuple[int, int, int]:
    return (d & 0x3FFF) << 4, ((d >> 16) & 0x3FFF) << 4, ((d >> 32) & 0x3FFF) << 4


def decode_descriptor(desc: Any) -> DescriptorFields:
    """Decodes a 64-bit wgmma matrix descriptor (the inverse of ``make_descriptor``).

    Bits outside the five fields are ignored, as by the hardware's field extraction.

    Args:
      desc: a concrete Python int or numpy integer in [0, 2**64) (int64 values are taken
        as their two's-complement bits).

    Returns:
      ``DescriptorFields`` in bytes.

    Example:
      >>> f = decode_descriptor(0x4000004000010040)
      >>> f.start_address, f.leading_byte_offset, f.stride_byte_offset, f.swizzle
      (1024, 16, 1024, 128)
    """
    d = _descriptor_bits(desc)
    return DescriptorFields(*_addresses_of(d), base_offset=(d >> 49) & 7,
                            swizzle=_SWIZZLE_BYTES[(d >> 62) & 3])


# --------------------------------------------------------------------------------------
# tcgen05 shared memory descriptors (PTX ISA, tcgen05 "Shared memory descriptor").

#: tcgen05 swizzle mode (bits 61-63) per swizzle: width in bytes, or ``"128B_base32B"``
#: (128-byte swizzle with 32-byte atomicity). 3, 5 and 7 are invalid.
TCGEN05_SWIZZLE_MODE: Mapping[Any, int] = MappingProxyType(
    {0: 0, "128B_base32B": 1, 128: 2, 64: 4, 32: 6})
_TCGEN05_SWIZZLE = {v: k for k, v in TCGEN05_SWIZZLE_MODE.items()}
_TCGEN05_VERSION = 0b001  # bits 46-48, fixed


class SmemDescriptorFields(NamedTuple):
    """The fields of a tcgen05 shared memory descriptor, in bytes.

    Attributes:
      start_address: shared-memory byte address of the matrix (bits 0-13, >> 4).
      leading_byte_offset: LBO (bits 16-29, >> 4): a relative byte offset, or with
        ``lbo_mode`` 1 an absolute byte address.
      stride_byte_offset: SBO (bits 32-45, >> 4).
      base_offset: matrix base offset (bits 49-51).
      lbo_mode: leading dimension stride mode (bit 52): 0 relative, 1 absolute.
      swizzle: 0, 32, 64 or 128 (bytes), or ``"128B_base32B"`` (bits 61-63).
    """

    start_address: int
    leading_byte_offset: int
    stride_byte_offset: int
    base_offset: int
    lbo_mode: int
    swizzle: Any


def make_smem_descriptor(start_address: int, leading_byte_offset: int,
                         stride_byte_offset: int, swizzle: Any = 0, base_offset: int = 0,
                         lbo_mode: int = 0) -> np.uint64:
    """Encodes a 64-bit tcgen05 shared memory descriptor.

    Bit fields (PTX ISA, tcgen05 "Shared memory descriptor")::

        bits  0-13  start address >> 4          bits 46-48  fixed 0b001
        bits 16-29  leading byte offset >> 4    bits 49-51  matrix base offset
        bits 32-45  stride byte offset >> 4     bit  52     LBO mode (0 relative)
        bits 61-63  swizzle: 0 none, 1 128-byte with 32-byte atoms, 2 128-byte,
                    4 64-byte, 6 32-byte

    The layouts the address fields describe are wgmma's (``layout_addresses``).

    Args:
      start_address, leading_byte_offset, stride_byte_offset: bytes, multiples of 16
        below 2**18 (as :func:`make_descriptor`).
      swizzle: 0, 32, 64, 128 or ``"128B_base32B"``.
      base_offset: 0..7 (only 0 is modelled when reading).
      lbo_mode: 0 (LBO is a relative offset) or 1 (an absolute address; sm_103a, for a
        48-byte K; not modelled when reading).

    Returns:
      The descriptor as ``numpy.uint64``.

    Raises:
      ValueError/TypeError: a field that is not a static int, not 16-byte aligned, or out
        of range (the message names it).

    Example:
      >>> hex(make_smem_descriptor(0, 128, 256))
      '0x401000080000'
      >>> hex(make_smem_descriptor(1024, 16, 1024, swizzle=32))
      '0xc000404000010040'
    """
    d = _address_fields(start_address, leading_byte_offset, stride_byte_offset)
    if not isinstance(swizzle, str):
        swizzle = checks.static_int(swizzle, "swizzle")
    checks.static_choice(swizzle, "swizzle", tuple(TCGEN05_SWIZZLE_MODE))
    mode = checks.static_int(lbo_mode, "lbo_mode")
    checks.static_choice(mode, "lbo_mode", (0, 1))
    return np.uint64(d | _TCGEN05_VERSION << 46 | _base_offset(base_offset) << 49
                     | mode << 52 | TCGEN05_SWIZZLE_MODE[swizzle] << 61)


def decode_smem_descriptor(desc: Any) -> SmemDescriptorFields:
    """Decodes a 64-bit tcgen05 shared memory descriptor (inverse of
    :func:`make_smem_descriptor`).

    Raises:
      ValueError: the fixed bits 46-48 are not 0b001, or the swizzle mode is 3, 5 or 7
        (invalid in the ISA). Other reserved bits are ignored.

    Example:
      >>> f = decode_smem_descriptor(0xc000404000010040)
      >>> f.start_address, f.leading_byte_offset, f.stride_byte_offset, f.swizzle
      (1024, 16, 1024, 32)
    """
    d = _descriptor_bits(desc)
    if (d >> 46) & 7 != _TCGEN05_VERSION:
        raise ValueError(f"descriptor={d:#x} is not a tcgen05 shared memory descriptor: bits "
                         f"46-48 must be 0b001, got {(d >> 46) & 7:#05b} (a wgmma descriptor? "
                         f"use make_smem_descriptor)")
    mode = (d >> 61) & 7
    if mode not in _TCGEN05_SWIZZLE:
        raise ValueError(f"descriptor={d:#x}: swizzle mode {mode} (bits 61-63) is invalid; "
                         f"allowed: {dict(TCGEN05_SWIZZLE_MODE)}")
    return SmemDescriptorFields(*_addresses_of(d), base_offset=(d >> 49) & 7,
                                lbo_mode=(d >> 52) & 1, swizzle=_TCGEN05_SWIZZLE[mode])


# --------------------------------------------------------------------------------------
# Canonical layouts: element -> byte address.


def _swizzle(addr: np.ndarray, width: int) -> np.ndarray:
    """16-byte chunk bits of a byte address XOR its 128-byte row bits (PTX ISA swizzles).

    128B: bits 4-6 ^= bits 7-9 (repeats every 1024 B); 64B: bits 4-5 ^= bits 7-8 (512 B);
    32B: bit 4 ^= bit 7 (256 B).
    """
    if width == 0:
        return addr
    return addr ^ (((addr >> 7) & (width // 16 - 1)) << 4)


def layout_addresses(start: int, lbo: int, sbo: int, swizzle: int, rows: int, k: int,
                     bits: int, transpose: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Byte addresses of a ``rows`` x ``k`` operand tile in a canonical layout.

    A *core matrix* is 8 rows x 16 bytes. With ``r`` the M/N index, ``kb`` the byte of K
    in a row (b1: element k is bit k % 8 of byte k // 8), ``mb`` the byte of M/N
    (M/N-major: ``bytes * r + byte``) and W the swizzle width::

        K-major,  no swizzle: (r%8)*16 + (r//8)*SBO + (kb%16) + (kb//16)*LBO
        K-major,  W-swizzle : (r%8)*W  + (r//8)*SBO + kb                 (LBO unused)
        MN-major, no swizzle: (mb%16) + (mb//16)*SBO + (k%8)*16 + (k//8)*LBO
        MN-major, W-swizzle : (mb%W)  + (mb//W)*LBO  + (k%8)*W  + (k//8)*SBO

    (LBO and SBO swap roles between the two M/N-major cases, as the ISA's canonical
    layouts say and the wgmma captures confirm.) The address is ``start + offset`` and
    the swizzle is then applied to it: ``addr ^ (((addr >> 7) & (W/16 - 1)) << 4)``, so
    a start address off the pattern's repeat boundary shifts the pattern exactly as it
    does on the GPU. Nothing checks that the layout is sensible.

    Args:
      start, lbo, sbo: bytes. swizzle: 0, 32, 64 or 128.
      rows: M or N. k: K elements. bits: element size (1, 8, 16 or 32).
      transpose: 1 for the M/N-major layout (whole-byte elements).

    Returns:
      ``(addr, bit)``: int64 arrays of shape (rows, k, bytes per element) (bytes in
      little-endian order) and, for b1, the bit within the byte (zeros otherwise).

    Example:
      >>> addr, _ = layout_addresses(0, 128, 256, 0, 64, 16, 16)
      >>> addr[1, 0].tolist(), addr[0, 8].tolist(), addr[8, 0].tolist()
      ([16, 17], [128, 129], [256, 257])
    """
    r = np.arange(rows).reshape(-1, 1, 1)
    kk = np.arange(k).reshape(1, -1, 1)
    nbytes = max(1, bits // 8)
    j = np.arange(nbytes).reshape(1, 1, -1)
    bit = np.zeros((rows, k, nbytes), np.int64)
    w = swizzle
    if transpose:
        if bits < 8:
            raise ValueError("M/N-major (transposed) operands need whole-byte elements")
        mb = nbytes * r + j
        if w == 0:
            off = mb % 16 + (mb // 16) * sbo + (kk % 8) * 16 + (kk // 8) * lbo
        else:
            off = mb % w + (mb // w) * lbo + (kk % 8) * w + (kk // 8) * sbo
    else:
        if bits == 1:
            kb = kk // 8 + 0 * j
            bit = np.broadcast_to(kk % 8, (rows, k, nbytes)).astype(np.int64)
        else:
            kb = kk * nbytes + j
        if w == 0:
            off = (r % 8) * 16 + (r // 8) * sbo + kb % 16 + (kb // 16) * lbo
        else:
            off = (r % 8) * w + (r // 8) * sbo + kb
    addr = _swizzle(start + np.broadcast_to(off, (rows, k, nbytes)), w)
    return addr.astype(np.int64), bit


def operand_addresses(desc: Any, rows: int, k: int, bits: int, *,
                      transpose: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Shared-memory byte addresses of an operand tile read through a wgmma descriptor:
    :func:`layout_addresses` of the descriptor's fields.

    Args:
      desc: the wgmma descriptor (static int).
      rows: M (64) or N. k: K elements. bits: element size (1, 8, 16 or 32).
      transpose: 1 for the M/N-major layout (16-bit types only).

    Raises:
      NotImplementedError: a non-zero base offset with a swizzle (not captured).

    Example:
      >>> addr, _ = operand_addresses(make_descriptor(0, 128, 256), 64, 16, 16)
      >>> addr[1, 0].tolist(), addr[0, 8].tolist(), addr[8, 0].tolist()
      ([16, 17], [128, 129], [256, 257])
    """
    f = decode_descriptor(desc)
    if f.base_offset and f.swizzle:
        raise NotImplementedError(
            f"descriptor base_offset={f.base_offset} with a {f.swizzle}-byte swizzle is not "
            f"modelled (no hardware capture); use 0 with patterns that start on their "
            f"repeat boundary")
    if transpose and bits != 16:
        raise ValueError("M/N-major (transposed) operands exist for 16-bit types only")
    return layout_addresses(f.start_address, f.leading_byte_offset, f.stride_byte_offset,
                            f.swizzle, rows, k, bits, transpose)


# --------------------------------------------------------------------------------------
# Shared memory as bytes, descriptor arguments.


def as_smem(smem: Any) -> jax.Array:
    """``smem`` as a (..., nbytes) uint8 array (``TypeError`` naming it otherwise)."""
    s = jnp.asarray(smem)
    if s.dtype != jnp.uint8 or s.ndim < 1:
        raise TypeError(f"smem must be a uint8 byte array (..., nbytes), got dtype {s.dtype} "
                        f"shape {s.shape}")
    return s


def check_range(addr: np.ndarray, size: int, what: str, desc: Any, fields: Any) -> None:
    """``ValueError`` naming the descriptor if an address is beyond ``size`` bytes."""
    hi = int(addr.max())
    if hi >= size:
        raise ValueError(f"{what}: descriptor {int(desc):#x} ({fields}) reads shared-memory "
                         f"byte {hi}, beyond smem of {size} bytes")


def gather(s: jax.Array, addr: np.ndarray, bit: np.ndarray, bits: int,
           dtype: np.dtype) -> jax.Array:
    """The (..., rows, k) elements at ``addr`` (bytes little-endian; b1: one bit) as
    raw bits of ``dtype``."""
    raw = s[..., addr]  # (..., rows, k, nbytes)
    if bits == 1:
        return (raw[..., 0] >> jnp.asarray(bit[..., 0], jnp.uint8)) & jnp.uint8(1)
    word = raw[..., 0].astype(jnp.uint32)
    for jj in range(1, raw.shape[-1]):
        word = word | (raw[..., jj].astype(jnp.uint32) << jnp.uint32(8 * jj))
    return bitops.from_u32(word, dtype)


def scatter(s: jax.Array, addr: np.ndarray, bit: np.ndarray, bits: int,
            x: jax.Array) -> jax.Array:
    """Shared memory ``s`` (nbytes,) with the (rows, k) raw bits ``x`` stored at
    ``addr`` (the inverse of :func:`gather` for a layout whose elements do not
    overlap); other bytes keep their value."""
    if bits == 1:  # gather the 8 bits of each byte (bits of a byte share one address)
        v = (x.astype(jnp.uint8) & jnp.uint8(1)) << jnp.asarray(bit[..., 0], jnp.uint8)
        byte_addr = addr[..., 0]
        cleared = s.at[byte_addr.reshape(-1)].set(jnp.uint8(0))
        return cleared.at[byte_addr.reshape(-1)].add(v.reshape(-1))
    u = bitops.to_u32(x)
    for jj in range(addr.shape[-1]):
        byte = ((u >> jnp.uint32(8 * jj)) & jnp.uint32(0xFF)).astype(jnp.uint8)
        s = s.at[addr[..., jj].reshape(-1)].set(byte.reshape(-1))
    return s


def is_descriptor(x: Any) -> bool:
    """A static integer (Python, numpy scalar or 0-d numpy array) is a descriptor."""
    if isinstance(x, bool):
        return False
    if isinstance(x, (int, np.integer)):
        return True
    return isinstance(x, np.ndarray) and x.ndim == 0 and np.issubdtype(x.dtype, np.integer)


def descriptor_arg(x: Any, name: str, decode=decode_descriptor,
                   maker: str = "make_descriptor") -> None:
    """Checks a descriptor argument (a static 64-bit integer ``decode`` accepts),
    naming it."""
    if not is_descriptor(x):
        what = "a traced value" if isinstance(x, jax.core.Tracer) else (
            f"{type(x).__name__} {x!r}")
        raise TypeError(f"{name} must be a descriptor: a static uint64 Python int, numpy "
                        f"integer or 0-d integer NumPy array (see {maker}), got {what}")
    try:
        decode(x)
    except ValueError as e:
        raise ValueError(f"{name}: {e}") from None


# --------------------------------------------------------------------------------------
# Predicates (wgmma scale-d, tcgen05 enable-input-d).


def keep_c(c: jax.Array, pred: Any, name: str) -> jax.Array:
    """C where the predicate ``pred`` holds, +0 elsewhere (``pred`` may be traced, any
    shape broadcasting to C's batch shape). A concrete integer other than 0 and 1 is a
    ``ValueError``; a traced integer predicate counts any non-zero value as 1."""
    if isinstance(pred, (str, bytes)) or pred is None:
        raise TypeError(f"{name} must be 0, 1, a bool or a bool/integer predicate array, "
                        f"got {type(pred).__name__} {pred!r}")
    if (not isinstance(pred, jax.core.Tracer) and np.ndim(pred) >= 0
            and np.issubdtype(np.asarray(pred).dtype, np.integer)
            and not np.isin(np.asarray(pred), (0, 1)).all()):
        raise ValueError(f"{name} must be 0 or 1 (or a bool predicate), got "
                         f"{np.asarray(pred).tolist()!r}")
    if isinstance(pred, (bool, int, np.integer)) and pred:
        return c
    keep = jnp.asarray(pred)
    if jnp.issubdtype(keep.dtype, jnp.integer):
        keep = keep != jnp.zeros((), keep.dtype)
    elif keep.dtype != jnp.bool_:
        raise TypeError(f"{name} must be a bool or integer predicate, got {keep.dtype}")
    keep = keep.reshape(keep.shape + (1, 1))
    return jnp.where(keep, c, jnp.zeros((), c.dtype))


def logical_bits(x: Any, name: str, t: str, shape: tuple[int, int], want: np.dtype,
                 store: np.dtype | None) -> jax.Array:
    """A logical operand ``name`` of type ``t`` as raw bits of dtype ``want``: given in
    ``want``, or in the value dtype ``store`` of the same width (reinterpreted).

    Raises:
      ValueError: the trailing shape is not ``shape``. TypeError: another dtype.
    """
    x = jnp.asarray(x)
    if x.ndim < 2 or x.shape[-2:] != shape:
        raise ValueError(f"{name} must have shape (..., {shape[0]}, {shape[1]}), got {x.shape}")
    if x.dtype == want:
        return x
    if store is not None and x.dtype == store and x.dtype.itemsize == want.itemsize:
        return bitops.from_bits(x, want)
    allowed = [str(want)] + ([str(store)] if store is not None else [])
    raise TypeError(f"{name} for type {t!r} must have dtype in {allowed}, got {x.dtype}")

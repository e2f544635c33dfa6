"""Configuration names of the PTX ``mma.sync`` and ``wgmma`` captures.

Schemas: ``tools/capture/FORMAT_PTX.md`` (``ptx/{name}``, ``chain/ptx/{name}x{steps}``)
and ``tools/capture/FORMAT_WGMMA.md`` (``wgmma/{name}``, ``chain/wgmma/{name}x{steps}``)::

    {atype}.{btype}.{ctype}{dtype}.m{M}n{N}k{K}[x{steps}][.{al}{bl}][.satfinite|.xor|.and]
    ... wgmma: [.satfinite][.areg][.ta][.tb][.sw32|.sw64|.sw128][.negA][.negB][.scaled0]
"""

from __future__ import annotations

import dataclasses

from jaxwarp._src.catalogue import isa
from jaxwarp._src.conformance.registry import CaptureError
from jaxwarp._src.numerics.formats import FORMATS

#: Operand (A/B) element types of the PTX captures: the catalogue's ``mma.sync`` A types
#: but those of ``.kind::`` rows (sm_120a; the captures are of sm_90a).
OPERAND_TYPES = tuple(dict.fromkeys(t for r in isa.rows("mma_sync") if not r.kind
                                    for t in r.a_formats))
#: Accumulator (C/D) types.
ACCUMULATOR_TYPES = isa.accumulator_types("mma_sync")
#: Floating-point operand types (negation flips their sign bit).
FLOAT_TYPES = tuple(t for t in OPERAND_TYPES if FORMATS[t].is_float)
#: Integer operand types (b1 apart: its products are bit operations).
INT_TYPES = tuple(dict.fromkeys(t for r in isa.rows("mma_sync") if r.datapath == "int"
                                for t in r.a_formats))

_PTX_LAYOUTS = ("rr", "cr", "cc")
_WGMMA_FLAGS = ("areg", "ta", "tb", "sw32", "sw64", "sw128", "negA", "negB", "scaled0")


@dataclasses.dataclass(frozen=True)
class MmaName:
    """A parsed ``ptx``/``wgmma`` configuration name (chains included).

    Attributes:
      op: ``"ptx"`` (``mma.sync``) or ``"wgmma"``.
      name: the name as in the file (with ``x{steps}`` for chains).
      a_format, b_format, c_format, d_format: element types.
      m, n, k: the shape of one instruction.
      steps: instructions chained (D of one is C of the next); 1 outside chains.
      layouts: the m8n8k4 f16 layout suffix (``"rr"``, ``"cr"``, ``"cc"``) or ``""``.
      satf: ``.satfinite``.
      bmma_op: ``"xor"``/``"and"`` for b1 (wgmma b1 is always ``.and.popc``).
      areg, trans_a, trans_b: wgmma A from registers / A M-major / B N-major.
      swizzle: wgmma shared-memory swizzle in bytes (0: none).
      neg_a, neg_b: wgmma imm-scale-a/b = -1.
      scale_d0: wgmma scale-d = 0 (C ignored).
    """

    op: str
    name: str
    a_format: str
    b_format: str
    c_format: str
    d_format: str
    m: int
    n: int
    k: int
    steps: int = 1
    layouts: str = ""
    satf: bool = False
    bmma_op: str | None = None
    areg: bool = False
    trans_a: bool = False
    trans_b: bool = False
    swizzle: int = 0
    neg_a: bool = False
    neg_b: bool = False
    scale_d0: bool = False

    @property
    def instruction(self) -> str:
        """The datapath's instruction name: ``"mma_sync"`` or ``"wgmma"``."""
        return "wgmma" if self.op == "wgmma" else "mma_sync"


def parse_mma_name(op: str, name: str, chain: bool = False) -> MmaName:
    """Parses a configuration name of the ``ptx``/``wgmma`` captures.

    Args:
      op: ``"ptx"`` or ``"wgmma"``.
      name: e.g. ``e4m3.e5m2.f32f32.m16n8k32`` or ``f16.f16.f32f32.m64n8k16.areg.negA``.
      chain: the name carries ``x{steps}`` after its shape (``chain/...`` keys).

    Raises:
      CaptureError: the name does not follow the schema (the message says what is wrong).

    Example:
      >>> n = parse_mma_name("wgmma", "f16.f16.f32f32.m64n8k16.ta.tb.sw64")
      >>> (n.a_format, n.k, n.trans_a, n.trans_b, n.swizzle)
      ('f16', 16, True, True, 64)
      >>> parse_mma_name("ptx", "bf16.bf16.f32f32.m16n8k16x256", chain=True).steps
      256
    """
    if op not in ("ptx", "wgmma"):
        raise CaptureError(f"op must be 'ptx' or 'wgmma'; got {op!r}")
    parts = name.split(".")
    where = f"{op} configuration {name!r}"
    if len(parts) < 4:
        raise CaptureError(f"{where}: not '{{atype}}.{{btype}}.{{ctype}}{{dtype}}.m{{M}}n{{N}}"
                           f"k{{K}}[suffixes]' (FORMAT_PTX.md / FORMAT_WGMMA.md)")
    a_format, b_format, cd, shape, *suffixes = parts
    for what, t in (("A", a_format), ("B", b_format)):
        if t not in OPERAND_TYPES:
            raise CaptureError(f"{where}: {what} type {t!r} unknown; valid: {OPERAND_TYPES}")
    c_format, d_format = cd[:3], cd[3:]
    for what, t in (("C", c_format), ("D", d_format)):
        if len(cd) != 6 or t not in ACCUMULATOR_TYPES:
            raise CaptureError(f"{where}: {what} type in {cd!r} unknown; valid: "
                               f"{ACCUMULATOR_TYPES} (written as e.g. 'f32f32')")
    head, x, tail = shape.partition("x")
    mnk = isa.parse_shape(head)
    if mnk is None or bool(x) != chain or (chain and not (tail.isascii() and tail.isdigit())):
        want = "m{M}n{N}k{K}x{steps}" if chain else "m{M}n{N}k{K}"
        raise CaptureError(f"{where}: shape {shape!r} is not {want!r}")
    m, n, k = mnk
    steps = int(tail) if chain else 1
    if steps < 1:
        raise CaptureError(f"{where}: a chain needs at least one step; got x{steps}")
    kw: dict = {}
    rest = list(suffixes)
    if rest and rest[0] == "satfinite":
        kw["satf"] = True
        rest.pop(0)
    if op == "ptx":
        if rest and rest[0] in _PTX_LAYOUTS:
            kw["layouts"] = rest.pop(0)
        if rest and rest[0] == "satfinite" and not kw.get("satf"):
            kw["satf"] = True
            rest.pop(0)
        if rest and rest[0] in isa.B1_OPS:
            kw["bmma_op"] = rest.pop(0)
        if rest:
            ops = ", ".join(map(repr, isa.B1_OPS))
            raise CaptureError(f"{where}: suffix {'.'.join(rest)!r} unknown; valid: layouts "
                               f"{_PTX_LAYOUTS}, 'satfinite', {ops}")
        if a_format == "b1" and "bmma_op" not in kw:
            ops = " or ".join(f"'.{op}'" for op in isa.B1_OPS)
            raise CaptureError(f"{where}: a b1 configuration needs {ops}")
    else:
        order = [f for f in _WGMMA_FLAGS if f in rest]
        unknown = [f for f in rest if f not in _WGMMA_FLAGS]
        if unknown or order != rest or len(set(rest)) != len(rest):
            raise CaptureError(f"{where}: suffixes {rest} unknown or out of order; valid, in "
                               f"this order: {_WGMMA_FLAGS} (after 'satfinite')")
        sw = [int(f[2:]) for f in rest if f.startswith("sw")]
        if len(sw) > 1:
            raise CaptureError(f"{where}: more than one swizzle suffix")
        kw.update(areg="areg" in rest, trans_a="ta" in rest, trans_b="tb" in rest,
                  swizzle=sw[0] if sw else 0, neg_a="negA" in rest, neg_b="negB" in rest,
                  scale_d0="scaled0" in rest)
        if a_format == "b1":
            kw["bmma_op"] = "and"  # sm_90a wgmma has only .and.popc
    if (a_format == "b1") != (b_format == "b1"):
        raise CaptureError(f"{where}: b1 goes only with b1")
    return MmaName(op, name, a_format, b_format, c_format, d_format, m, n, k, steps, **kw)


def split_key(key: str) -> tuple[str, str, str] | None:
    """``ptx/NAME/A`` -> (``"ptx"``, NAME, ``"A"``); ``chain/wgmma/NAME/D`` ->
    (``"chain/wgmma"``, NAME, ``"D"``); None for other keys.

    Example:
      >>> split_key("chain/ptx/f16.f16.f32f32.m16n8k16x4/kind")
      ('chain/ptx', 'f16.f16.f32f32.m16n8k16x4', 'kind')
    """
    parts = key.split("/")
    if len(parts) == 3 and parts[0] in ("ptx", "wgmma"):
        return parts[0], parts[1], parts[2]
    if len(parts) == 4 and parts[0] == "chain" and parts[1] in ("ptx", "wgmma"):
        return f"chain/{parts[1]}", parts[2], parts[3]
    return None

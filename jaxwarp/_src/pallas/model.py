"""What a kernel's products run on (``KernelModel``), what ran (``KernelProduct``) and the
error a kernel product that no instruction models raises (``KernelProductError``)."""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxwarp._src.config import config
from jaxwarp._src.gemm.matmul import matmul
from jaxwarp._src.numerics import formats


def dtype_format(dtype) -> str | None:
    """The operand format a kernel's tensor-core product of ``dtype`` runs in (the format
    registry's name; float32 words go to the tensor core as tf32), or None."""
    name = np.dtype(dtype).name
    return "tf32" if name == "float32" else formats.ALIASES.get(name)


#: The modes a kernel product runs in: ``matmul``'s (``"native"`` only where matmul has it).
MODES = ("exact", "fast", "native")


class KernelProductError(NotImplementedError):
    """A product in a Pallas kernel that no modelled instruction runs (emulate reports it
    as an ``UnsupportedProductError``)."""


@dataclasses.dataclass(frozen=True)
class KernelModel:
    """The settings a kernel's products run with (emulate's, checked there).

    Attributes:
        operand_format: None (the kernel's own operand dtype) or a format name; a kernel
            product of another (f16 / bf16 / fp8) dtype is an error naming both.
        instruction: None (the instruction the kernel's compiler issues) or one of
            matmul's instructions (overrides the compiler's choice).
        arch: the target (``"sm_90a"``, the H100 / H200's; ``"sm_90"`` means the same).
        mode: matmul's mode (``"exact"``, ``"fast"``, ``"native"``).
        promote_every: None or N, passed to every product (partial sums promoted to fp32
            every N k-elements of one product).
    """

    operand_format: str | None = None
    instruction: str | None = None
    arch: str = "sm_90a"
    mode: str = "exact"
    promote_every: int | None = None


@dataclasses.dataclass(frozen=True)
class KernelProduct:
    """One ``dot_general`` of a kernel body and the instruction chain that ran it.

    Attributes:
        lhs_shape, rhs_shape, out_shape: the block shapes the kernel multiplies.
        lhs_dtype, rhs_dtype, out_dtype: their dtype names.
        m, n, k: the product's GEMM sizes (one grid program's block).
        operand_format: the format the chain runs in (f16 for fp8 operands on sm_90a).
        instruction: ``"wgmma"``, ``"mma_sync"``, ``"wmma"`` or ``"fma"`` (fp32 FMAs).
        accumulator: the chain's accumulator format.
        c_from: ``""`` (a zero C), or how C was fused: ``"add"`` (an add of the product
            folded into its accumulator, as the compiler does).
        note: how the model was derived and what evidence it has.
        kernel: the kernel's name.
    """

    lhs_shape: tuple[int, ...]
    rhs_shape: tuple[int, ...]
    lhs_dtype: str
    rhs_dtype: str
    out_shape: tuple[int, ...]
    out_dtype: str
    m: int
    n: int
    k: int
    operand_format: str
    instruction: str
    accumulator: str
    c_from: str = ""
    note: str = ""
    kernel: str = ""


def kernel_matmul(*args, **kwargs):
    """``jaxwarp.matmul`` on its inline path, for a product inside a kernel body (and for
    emulate's check of its settings): the model's k loop inline in the interpreted kernel
    (``gemm_shared="off"``, ``gemm_fused_kernel="off"``), never a host callback or a GPU
    kernel of jaxwarp's own launched from inside it (on a GPU
    with JAX 0.11.2, the fused kernel traced inside an interpreted Triton-style kernel
    failed: "lax.shift_right_logical requires arguments to have the same dtypes, got
    int32, int64")."""
    with config.override(gemm_shared="off", gemm_fused_kernel="off"):
        return matmul(*args, **kwargs)

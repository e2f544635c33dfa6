"""Run a whole JAX program's matrix products through an emulated tensor core.

``emulate(fn, operand_format=...)`` traces ``fn`` to a jaxpr (``jax.make_jaxpr``)
and evaluates it equation by equation, as ``jax.experimental.checkify`` and
``jax.experimental.jet`` do. Every floating-point ``dot_general`` and
``conv_general_dilated`` is replaced by :func:`jaxwarp.matmul` on the same
numbers; every other equation is bound unchanged. Control flow and wrappers are
entered and rebuilt with their public constructors (``jax.jit``, ``lax.scan``,
``lax.while_loop``, ``lax.switch``, ``jax.checkpoint``, ``jax.shard_map``), so
the emulated program keeps its structure, and ``custom_jvp`` / ``custom_vjp``
calls keep their derivative rules (with the products inside them emulated too).

How a ``dot_general`` becomes a GEMM (the k order is part of the contract)::

    lhs  -> transpose to (batch..., lhs free..., contracting...) -> (B, M, K)
    rhs  -> transpose to (batch..., contracting..., rhs free...) -> (B, K, N)
    D[b] = jaxwarp.matmul(lhs[b], rhs[b])          # vmapped over B when there are batch dims
    D    -> (batch..., lhs free..., rhs free...)   # dot_general's own output order

K is row-major over the contracting dimensions *in the order the dimension
numbers list them* (lhs's contracting dim ``lc[0]`` is the slowest), so the
tensor core's k loop walks that order. M, N and K are zero-padded up to a
multiple of the instruction tile (``lcm`` of its m, n, k) as a predicated tile
load does (CUTLASS fills out-of-bounds elements with zero); zero products and
all-zero k steps leave the fp32 accumulator unchanged, so padding changes no
bit (tested), and the padding also keeps ``matmul``'s backward products on
tile-sized shapes.

``conv_general_dilated`` is the implicit GEMM it is on a GPU: im2col gathers each
output pixel's receptive field into one row, with K ordered
``(kernel spatial..., input channel)`` row-major, i.e. ``(kh, kw, cin)`` for a 2-D
convolution, as CUTLASS's NHWC implicit GEMM iterates it; then
``matmul(patches, filter)`` with batch dimension = feature groups.

Gradients: ``jax.grad`` of an emulated function differentiates the emulated
program; each product is ``matmul``, whose ``custom_vjp`` runs the backward
products ``dA = dD @ B^T`` and ``dB = A^T @ dD`` on the same emulated tensor core
(operands converted again to the operand format). With ``scaling`` or
``backward_format`` set, emulate's own ``custom_vjp`` does the same with the
recipe's scales and gradient format. The im2col gather of a convolution is
differentiated by JAX (its transpose, a scatter-add, runs in fp32 outside the
tensor core: a real dgrad kernel accumulates those sums inside the GEMM).
"""

from jaxwarp._src.emulate.api import emulate as emulate
from jaxwarp._src.emulate.report import EmulationReport as EmulationReport
from jaxwarp._src.emulate.report import Product as Product
from jaxwarp._src.emulate.report import ProductFilter as ProductFilter
from jaxwarp._src.emulate.report import ReportEntry as ReportEntry
from jaxwarp._src.emulate.report import UnsupportedProductError as UnsupportedProductError

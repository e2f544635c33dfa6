"""Block-scaled formats: OCP Microscaling (MXFP8, MXFP6, MXFP4, MXINT8) and NVFP4
quantizers, bit-exact (``jaxwarp.mx.quantize``, ``dequantize``, ``fake_quantize``), whose
element format may also be one made by ``jaxwarp.define_format`` (``docs/formats.md``). A
quantized tensor is an :class:`MXTensor` pytree. ``jaxwarp.mx.matmul`` is the block-scaled
GEMM; :class:`Recipe` and :data:`RECIPES` are the training recipes of
``jaxwarp.emulate(fn, recipe=...)``. See ``docs/microscaling.md``."""

from jaxwarp._src.gemm.block_scale_gemm import matmul as matmul
from jaxwarp._src.recipes.recipe import RECIPES as RECIPES
from jaxwarp._src.recipes.recipe import Recipe as Recipe
from jaxwarp._src.scaling.mx import MXTensor as MXTensor
from jaxwarp._src.scaling.mx import dequantize as dequantize
from jaxwarp._src.scaling.mx import fake_quantize as fake_quantize
from jaxwarp._src.scaling.mx import quantize as quantize
from jaxwarp._src.scaling.mx_formats import MODES as MODES
from jaxwarp._src.scaling.mx_formats import MX_FORMATS as MX_FORMATS
from jaxwarp._src.scaling.mx_formats import SCALE_RULES as SCALE_RULES
from jaxwarp._src.scaling.mx_formats import MXFormat as MXFormat

# The public names: what ``help()``, ``pydoc`` and ``from ... import *`` list (the
# re-exports above; a test checks the two agree).
__all__ = sorted(_n for _n in dir() if not _n.startswith("_"))

"""fp8 (e4m3 and e5m2) conversions, bit-exact to an H100: CUDA's ``__nv_cvt_*`` intrinsics and
PTX ``cvt`` (``jaxwarp.fp8.cvt_f32_to_e4m3x2`` ...); and the ue8m0 block-scale conversions
of ``cuda_fp8.h`` and sm_100a PTX (``jaxwarp.fp8.cvt_f32_to_ue8m0x2`` ...), which follow
the PTX ISA text (not verified on hardware). Packed values are uint16/uint32 words laid out
as in registers. Each function's docstring gives its semantics and an example.

fp8 training recipes (``docs/fp8_recipes.md``): ``quantize_blockwise`` (DeepSeek-V3's
1x128 / 128x128 block scales, TransformerEngine's ``Float8BlockScaling``) and
``DelayedScaling``, ``DelayedScalingState``, ``delayed_matmul`` (TransformerEngine's delayed
scaling as pure functions)."""

# fp8 training recipes (docs/fp8_recipes.md): DeepSeek-V3's blockwise scales,
# TransformerEngine's delayed scaling.
from jaxwarp._src.numerics.fp8 import FP8_FORMATS as FP8_FORMATS
from jaxwarp._src.numerics.fp8 import PTX_FORMS as PTX_FORMS
from jaxwarp._src.numerics.fp8 import cvt_f16x2_to_fp8x2 as cvt_f16x2_to_fp8x2
from jaxwarp._src.numerics.fp8 import cvt_f32_to_e4m3x2 as cvt_f32_to_e4m3x2
from jaxwarp._src.numerics.fp8 import cvt_f32_to_e5m2x2 as cvt_f32_to_e5m2x2
from jaxwarp._src.numerics.fp8 import cvt_f32_to_fp8x2 as cvt_f32_to_fp8x2
from jaxwarp._src.numerics.fp8 import cvt_fp8x2_to_f16x2 as cvt_fp8x2_to_f16x2
from jaxwarp._src.numerics.fp8_intrinsics import bfloat16raw2_to_fp8x2 as bfloat16raw2_to_fp8x2
from jaxwarp._src.numerics.fp8_intrinsics import bfloat16raw_to_fp8 as bfloat16raw_to_fp8
from jaxwarp._src.numerics.fp8_intrinsics import double_to_fp8 as double_to_fp8
from jaxwarp._src.numerics.fp8_intrinsics import float2_to_fp8x2 as float2_to_fp8x2
from jaxwarp._src.numerics.fp8_intrinsics import float_to_fp8 as float_to_fp8
from jaxwarp._src.numerics.fp8_intrinsics import fp8_to_halfraw as fp8_to_halfraw
from jaxwarp._src.numerics.fp8_intrinsics import fp8x2_to_halfraw2 as fp8x2_to_halfraw2
from jaxwarp._src.numerics.fp8_intrinsics import halfraw2_to_fp8x2 as halfraw2_to_fp8x2
from jaxwarp._src.numerics.fp8_intrinsics import halfraw_to_fp8 as halfraw_to_fp8
from jaxwarp._src.recipes.delayed import DelayedScaling as DelayedScaling
from jaxwarp._src.recipes.delayed import DelayedScalingState as DelayedScalingState
from jaxwarp._src.recipes.delayed import delayed_matmul as delayed_matmul
from jaxwarp._src.scaling.blockwise import quantize_blockwise as quantize_blockwise
from jaxwarp._src.scaling.ue8m0 import E8M0_PTX_FORMS as E8M0_PTX_FORMS
from jaxwarp._src.scaling.ue8m0 import E8M0_ROUNDINGS as E8M0_ROUNDINGS
from jaxwarp._src.scaling.ue8m0 import bfloat16raw_to_e8m0 as bfloat16raw_to_e8m0
from jaxwarp._src.scaling.ue8m0 import bfloat162raw_to_e8m0x2 as bfloat162raw_to_e8m0x2
from jaxwarp._src.scaling.ue8m0 import cvt_bf16x2_to_ue8m0x2 as cvt_bf16x2_to_ue8m0x2
from jaxwarp._src.scaling.ue8m0 import cvt_f32_to_ue8m0x2 as cvt_f32_to_ue8m0x2
from jaxwarp._src.scaling.ue8m0 import cvt_ue8m0x2_to_bf16x2 as cvt_ue8m0x2_to_bf16x2
from jaxwarp._src.scaling.ue8m0 import double_to_e8m0 as double_to_e8m0
from jaxwarp._src.scaling.ue8m0 import e8m0_to_bf16raw as e8m0_to_bf16raw
from jaxwarp._src.scaling.ue8m0 import e8m0x2_to_bf162raw as e8m0x2_to_bf162raw
from jaxwarp._src.scaling.ue8m0 import float2_to_e8m0x2 as float2_to_e8m0x2
from jaxwarp._src.scaling.ue8m0 import float_to_e8m0 as float_to_e8m0

# The public names: what ``help()``, ``pydoc`` and ``from ... import *`` list (the
# re-exports above; a test checks the two agree).
__all__ = sorted(_n for _n in dir() if not _n.startswith("_"))

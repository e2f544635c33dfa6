"""fp6 (e2m3, e3m2) conversions of PTX ``cvt`` (sm_100a, sm_120a) and ``cuda_fp6.h``
(``jaxwarp.fp6.cvt_f32_to_e2m3x2`` ...), following the PTX ISA text (not verified on
hardware). Packed values are uint8/uint16/uint32 words laid out as in registers; an fp6
code sits in bits 5:0 of its byte. Each function's docstring gives its semantics and an
example."""

from jaxwarp._src.numerics.fp6 import FP6_FORMATS as FP6_FORMATS
from jaxwarp._src.numerics.fp6 import PTX_FORMS as PTX_FORMS
from jaxwarp._src.numerics.fp6 import ROUNDINGS as ROUNDINGS
from jaxwarp._src.numerics.fp6 import bfloat16raw2_to_fp6x2 as bfloat16raw2_to_fp6x2
from jaxwarp._src.numerics.fp6 import bfloat16raw_to_fp6 as bfloat16raw_to_fp6
from jaxwarp._src.numerics.fp6 import cvt_f32_to_e2m3x2 as cvt_f32_to_e2m3x2
from jaxwarp._src.numerics.fp6 import cvt_f32_to_e3m2x2 as cvt_f32_to_e3m2x2
from jaxwarp._src.numerics.fp6 import cvt_f32_to_fp6x2 as cvt_f32_to_fp6x2
from jaxwarp._src.numerics.fp6 import cvt_fp6x2_to_f16x2 as cvt_fp6x2_to_f16x2
from jaxwarp._src.numerics.fp6 import double_to_fp6 as double_to_fp6
from jaxwarp._src.numerics.fp6 import float2_to_fp6x2 as float2_to_fp6x2
from jaxwarp._src.numerics.fp6 import float_to_fp6 as float_to_fp6
from jaxwarp._src.numerics.fp6 import fp6_to_halfraw as fp6_to_halfraw
from jaxwarp._src.numerics.fp6 import fp6x2_to_halfraw2 as fp6x2_to_halfraw2
from jaxwarp._src.numerics.fp6 import halfraw2_to_fp6x2 as halfraw2_to_fp6x2
from jaxwarp._src.numerics.fp6 import halfraw_to_fp6 as halfraw_to_fp6

# The public names: what ``help()``, ``pydoc`` and ``from ... import *`` list (the
# re-exports above; a test checks the two agree).
__all__ = sorted(_n for _n in dir() if not _n.startswith("_"))

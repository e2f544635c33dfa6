"""fp4 (e2m1) conversions of PTX ``cvt`` (sm_100a, sm_120a) and ``cuda_fp4.h``
(``jaxwarp.fp4.cvt_f32_to_e2m1x2`` ...), following the PTX ISA text (not verified on
hardware). Packed values are uint8/uint32 words laid out as in registers (two e2m1 codes
to a byte). Each function's docstring gives its semantics and an example."""

from jaxwarp._src.numerics.fp4 import FP4_FORMATS as FP4_FORMATS
from jaxwarp._src.numerics.fp4 import PTX_FORMS as PTX_FORMS
from jaxwarp._src.numerics.fp4 import ROUNDINGS as ROUNDINGS
from jaxwarp._src.numerics.fp4 import bfloat16raw2_to_fp4x2 as bfloat16raw2_to_fp4x2
from jaxwarp._src.numerics.fp4 import bfloat16raw_to_fp4 as bfloat16raw_to_fp4
from jaxwarp._src.numerics.fp4 import cvt_e2m1x2_to_f16x2 as cvt_e2m1x2_to_f16x2
from jaxwarp._src.numerics.fp4 import cvt_f32_to_e2m1x2 as cvt_f32_to_e2m1x2
from jaxwarp._src.numerics.fp4 import double_to_fp4 as double_to_fp4
from jaxwarp._src.numerics.fp4 import float2_to_fp4x2 as float2_to_fp4x2
from jaxwarp._src.numerics.fp4 import float_to_fp4 as float_to_fp4
from jaxwarp._src.numerics.fp4 import fp4_to_halfraw as fp4_to_halfraw
from jaxwarp._src.numerics.fp4 import fp4x2_to_halfraw2 as fp4x2_to_halfraw2
from jaxwarp._src.numerics.fp4 import halfraw2_to_fp4x2 as halfraw2_to_fp4x2
from jaxwarp._src.numerics.fp4 import halfraw_to_fp4 as halfraw_to_fp4

# The public names: what ``help()``, ``pydoc`` and ``from ... import *`` list (the
# re-exports above; a test checks the two agree).
__all__ = sorted(_n for _n in dir() if not _n.startswith("_"))

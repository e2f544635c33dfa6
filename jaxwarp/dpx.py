"""DPX integer functions (``__vimax3_s32`` ... ``__viaddmin_s16x2_relu``), bit-exact to an H100.

Names drop CUDA's leading underscores: ``__vimax3_s32(a, b, c)`` is
``jaxwarp.dpx.vimax3_s32(a, b, c)``. ``vib*`` functions return ``(value, pred)``
(``(value, pred_hi, pred_lo)`` for the 16x2 forms). Each function's docstring gives
its CUDA semantics and an example.
"""

from jaxwarp._src.warp.dpx import DPX_FUNCTIONS as DPX_FUNCTIONS
from jaxwarp._src.warp.dpx import DPX_PRED_FUNCTIONS as DPX_PRED_FUNCTIONS
from jaxwarp._src.warp.dpx import viaddmax_s16x2 as viaddmax_s16x2
from jaxwarp._src.warp.dpx import viaddmax_s16x2_relu as viaddmax_s16x2_relu
from jaxwarp._src.warp.dpx import viaddmax_s32 as viaddmax_s32
from jaxwarp._src.warp.dpx import viaddmax_s32_relu as viaddmax_s32_relu
from jaxwarp._src.warp.dpx import viaddmax_u16x2 as viaddmax_u16x2
from jaxwarp._src.warp.dpx import viaddmax_u32 as viaddmax_u32
from jaxwarp._src.warp.dpx import viaddmin_s16x2 as viaddmin_s16x2
from jaxwarp._src.warp.dpx import viaddmin_s16x2_relu as viaddmin_s16x2_relu
from jaxwarp._src.warp.dpx import viaddmin_s32 as viaddmin_s32
from jaxwarp._src.warp.dpx import viaddmin_s32_relu as viaddmin_s32_relu
from jaxwarp._src.warp.dpx import viaddmin_u16x2 as viaddmin_u16x2
from jaxwarp._src.warp.dpx import viaddmin_u32 as viaddmin_u32
from jaxwarp._src.warp.dpx import vibmax_s16x2 as vibmax_s16x2
from jaxwarp._src.warp.dpx import vibmax_s32 as vibmax_s32
from jaxwarp._src.warp.dpx import vibmax_u16x2 as vibmax_u16x2
from jaxwarp._src.warp.dpx import vibmax_u32 as vibmax_u32
from jaxwarp._src.warp.dpx import vibmin_s16x2 as vibmin_s16x2
from jaxwarp._src.warp.dpx import vibmin_s32 as vibmin_s32
from jaxwarp._src.warp.dpx import vibmin_u16x2 as vibmin_u16x2
from jaxwarp._src.warp.dpx import vibmin_u32 as vibmin_u32
from jaxwarp._src.warp.dpx import vimax3_s16x2 as vimax3_s16x2
from jaxwarp._src.warp.dpx import vimax3_s16x2_relu as vimax3_s16x2_relu
from jaxwarp._src.warp.dpx import vimax3_s32 as vimax3_s32
from jaxwarp._src.warp.dpx import vimax3_s32_relu as vimax3_s32_relu
from jaxwarp._src.warp.dpx import vimax3_u16x2 as vimax3_u16x2
from jaxwarp._src.warp.dpx import vimax3_u32 as vimax3_u32
from jaxwarp._src.warp.dpx import vimax_s16x2_relu as vimax_s16x2_relu
from jaxwarp._src.warp.dpx import vimax_s32_relu as vimax_s32_relu
from jaxwarp._src.warp.dpx import vimin3_s16x2 as vimin3_s16x2
from jaxwarp._src.warp.dpx import vimin3_s16x2_relu as vimin3_s16x2_relu
from jaxwarp._src.warp.dpx import vimin3_s32 as vimin3_s32
from jaxwarp._src.warp.dpx import vimin3_s32_relu as vimin3_s32_relu
from jaxwarp._src.warp.dpx import vimin3_u16x2 as vimin3_u16x2
from jaxwarp._src.warp.dpx import vimin3_u32 as vimin3_u32
from jaxwarp._src.warp.dpx import vimin_s16x2_relu as vimin_s16x2_relu
from jaxwarp._src.warp.dpx import vimin_s32_relu as vimin_s32_relu

# The public names: what ``help()``, ``pydoc`` and ``from ... import *`` list (the
# re-exports above; a test checks the two agree).
__all__ = sorted(_n for _n in dir() if not _n.startswith("_"))

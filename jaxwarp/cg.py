"""Cooperative groups over one warp (CUDA's ``cooperative_groups``), bit for bit.

``thread_block_tile`` of 1, 2, 4, 8, 16 or 32 lanes, ``coalesced_threads()``,
``labeled_partition`` and ``binary_partition`` with their ranks, shuffles, votes and
matches; ``reduce``, ``inclusive_scan`` and ``exclusive_scan`` with the float results in the
order of the CUDA 13 header (checked against an H100). See docs/cooperative_groups.md.

Example:
    >>> import jaxwarp.cg as cg
    >>> tile = cg.thread_block_tile(16)
    >>> cg.reduce(tile, jaxwarp.lane_id(), cg.plus)[jnp.array([0, 16])]
    Array([120, 376], dtype=int32)
"""

from jaxwarp._src.warp.cg import TILE_SIZES as TILE_SIZES
from jaxwarp._src.warp.cg import Group as Group
from jaxwarp._src.warp.cg import ThreadBlock as ThreadBlock
from jaxwarp._src.warp.cg import binary_partition as binary_partition
from jaxwarp._src.warp.cg import coalesced_threads as coalesced_threads
from jaxwarp._src.warp.cg import labeled_partition as labeled_partition
from jaxwarp._src.warp.cg import this_thread_block as this_thread_block
from jaxwarp._src.warp.cg import thread_block_tile as thread_block_tile
from jaxwarp._src.warp.cg import tiled_partition as tiled_partition
from jaxwarp._src.warp.cg_reduce import OPS as OPS
from jaxwarp._src.warp.cg_reduce import Op as Op
from jaxwarp._src.warp.cg_reduce import bit_and as bit_and
from jaxwarp._src.warp.cg_reduce import bit_or as bit_or
from jaxwarp._src.warp.cg_reduce import bit_xor as bit_xor
from jaxwarp._src.warp.cg_reduce import elected as elected
from jaxwarp._src.warp.cg_reduce import exclusive_scan as exclusive_scan
from jaxwarp._src.warp.cg_reduce import greater as greater
from jaxwarp._src.warp.cg_reduce import inclusive_scan as inclusive_scan
from jaxwarp._src.warp.cg_reduce import invoke_one_broadcast as invoke_one_broadcast
from jaxwarp._src.warp.cg_reduce import less as less
from jaxwarp._src.warp.cg_reduce import plus as plus
from jaxwarp._src.warp.cg_reduce import reduce as reduce

# Do not import jaxwarp._src directly: it is private and may change.

# The public names: what ``help()``, ``pydoc`` and ``from ... import *`` list (the
# re-exports above; a test checks the two agree).
__all__ = sorted(_n for _n in dir() if not _n.startswith("_"))

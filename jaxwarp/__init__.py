"""jaxwarp: NVIDIA warp-level programming modelled bit for bit in JAX.

The lane axis is the leading axis of size 32; many warps are a ``jax.vmap`` away.
Everything public is listed here; ``jaxwarp._src`` is private.
"""

# Checked mode.
# DPX integer functions live in their own namespace: jaxwarp.dpx.vimax3_s32, ...
from jaxwarp import dpx as dpx
from jaxwarp._src.checked import checked as checked

# Reductions.
from jaxwarp._src.reduce import reduce_add_sync as reduce_add_sync
from jaxwarp._src.reduce import reduce_and_sync as reduce_and_sync
from jaxwarp._src.reduce import reduce_max_sync as reduce_max_sync
from jaxwarp._src.reduce import reduce_min_sync as reduce_min_sync
from jaxwarp._src.reduce import reduce_or_sync as reduce_or_sync
from jaxwarp._src.reduce import reduce_sync as reduce_sync
from jaxwarp._src.reduce import reduce_xor_sync as reduce_xor_sync

# Votes and matches.
from jaxwarp._src.vote import all_sync as all_sync
from jaxwarp._src.vote import any_sync as any_sync
from jaxwarp._src.vote import ballot_sync as ballot_sync
from jaxwarp._src.vote import match_all_sync as match_all_sync
from jaxwarp._src.vote import match_any_sync as match_any_sync

__version__ = "0.1.0"

# Do not import from jaxwarp._src: it is private and changes without notice.

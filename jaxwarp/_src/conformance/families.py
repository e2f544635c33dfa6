"""Every handler family of the conformance command, in one list.

`HANDLERS` is the only registration: a handler module defines functions and this table
says which keys each one claims. A family whose keys sit under a path prefix (``ld/``,
``ptx/``, ``red/``, ...) owns it (``registry.under``); the WMMA configurations,
``{config}/{A,B,C,D,kind}``, are the ``/`` keys under no family's prefix, so a new family
adds its prefixes here and nothing else changes. The file-wide keys (``device``, the
capture tool's ``meta``) are read once by ``check.check_file``. The order is the order
of the report (and a key may be read by more than one family: ``dpx_a`` feeds both DPX
tables).
"""

from __future__ import annotations

from jaxwarp._src.conformance import golden_keys
from jaxwarp._src.conformance.handlers import cg as cg
from jaxwarp._src.conformance.handlers import diverge as diverge
from jaxwarp._src.conformance.handlers import golden as golden
from jaxwarp._src.conformance.handlers import movcvt as movcvt
from jaxwarp._src.conformance.handlers import ptx as ptx
from jaxwarp._src.conformance.handlers import sparse as sparse
from jaxwarp._src.conformance.handlers import warp as warp
from jaxwarp._src.conformance.handlers import wmma as wmma
from jaxwarp._src.conformance.registry import Handler, keys_where, needs_all, under, unowned_paths


def _wmma_configs(files: set) -> set:
    """The WMMA configuration keys: every ``/`` key under no family's prefix."""
    return unowned_paths(files, OWNED)


HANDLERS: tuple[Handler, ...] = (
    # warp.npz, capture_extra_warp.npz
    *(Handler(prefix, needs_all(f"{prefix}_cfg", f"{prefix}_x", f"{prefix}_out"),
              warp.shuffle(prefix)) for prefix in warp.SHFL_VIEWS),
    Handler("reduce", needs_all("reduce_cfg", "reduce_x", "reduce_out"), warp.reduce_ops),
    Handler("vote", needs_all("vote_mask", "vote_x", "vote_out"), warp.votes),
    Handler("dpx", needs_all("dpx_a", "dpx_b", "dpx_c", "dpx_out"), warp.dpx_functions),
    Handler("dpx predicates", needs_all("dpx_a", "dpx_b", "dpx_pred"), warp.dpx_predicates),
    Handler("cvt", needs_all("cvt_x", "cvt_out"), warp.conversions),
    # cg_div.npz (tools/capture/capture_cg.py): divergent one-warp programs
    under("div", ("div/",), diverge.divergent_programs,
          needs_all("div/cfg", "div/x", "div/out")),
    under("undef", ("undef/",), diverge.undefined_uses),  # it checks its keys
    # h100_cg.npz: cooperative groups (tools/capture/FORMAT_CG.md); the programming
    # guide's examples (``ex/text``, ``ex{N}/...``) are reported as not modelled here.
    under("cg tiles", ("tile",), cg.tiles, keys_where(cg.is_tile_key)),
    under("cg examples", ("ex",), cg.examples, keys_where(cg.is_example_key)),
    under("cg reduce/scan", ("red/",), cg.reductions),
    under("cg partitions", ("part/",), cg.partitions),
    # layout.npz, mma_*.npz, capture_extra_{mma,ldst}.npz
    Handler("layout", keys_where(wmma.is_layout_key), wmma.layouts),
    Handler("mma", _wmma_configs, wmma.mma_configs),
    under("load", ("ld/",), wmma.loads),
    under("store", ("st/",), wmma.stores),
    # ptx_mma*.npz, wgmma*.npz, *_chain.npz (chain/ptx, chain/wgmma; chain/sp is sparse's)
    under("ptx/wgmma/chain", ("ptx/", "wgmma/", "chain/"), ptx.mma_configs,
          keys_where(ptx.is_mma_key)),
    # sp_mma*.npz, sp_chain*.npz, wgsp*.npz (tools/capture/FORMAT_SP.md)
    under("sp/wgsp/chain", ("sp/", "wgsp/", "chain/sp/"), sparse.configs,
          keys_where(sparse.is_sparse_key)),
    # cvt_fp8.npz, ldmatrix.npz
    under("fp8 cvt", ("cvt/",), movcvt.conversions),
    under("ldmatrix/stmatrix/movmatrix", ("ldmatrix/", "stmatrix/", "movmatrix/"),
          movcvt.matrix_moves, keys_where(movcvt.is_matrix_move_key)),
    # reference-model files (tools/crosscheck: MMA-Sim), golden/{family}/{arch}/...
    under("golden (reference model)", ("golden/",), golden.configs,
          keys_where(golden_keys.is_golden_key)),
)

#: Every family's key prefixes (the ``/`` keys under none are WMMA configurations).
OWNED: tuple[str, ...] = tuple(p for h in HANDLERS for p in h.prefixes)

"""Every handler family of the conformance command, in one list.

`HANDLERS` is the only registration: a handler module defines functions and this table
says which keys each one claims. The order is the order of the report (and a key may be
read by more than one family: ``dpx_a`` feeds both DPX tables).
"""

from __future__ import annotations

from collections.abc import Callable

from jaxwarp._src.conformance import golden_keys
from jaxwarp._src.conformance import handlers_cg as cg
from jaxwarp._src.conformance import handlers_diverge as diverge
from jaxwarp._src.conformance import handlers_golden as golden
from jaxwarp._src.conformance import handlers_movcvt as movcvt
from jaxwarp._src.conformance import handlers_ptx as ptx
from jaxwarp._src.conformance import handlers_sparse as sparse
from jaxwarp._src.conformance import handlers_warp as warp
from jaxwarp._src.conformance import handlers_wmma as wmma
from jaxwarp._src.conformance.registry import Handler, keys_where, needs_all


def with_meta(match: Callable[[set], set]) -> Callable[[set], set]:
    """``match``, claiming also the capture tool's ``meta`` JSON where the family is there
    (``tools/capture/capture_cg.py`` writes one into its tile and divergence files)."""
    def claim(files: set) -> set:
        keys = match(files)
        return keys | ({"meta"} & files) if keys else keys
    return claim


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
    Handler("div", with_meta(needs_all("div/cfg", "div/x", "div/out")),
            diverge.divergent_programs),
    Handler("undef", needs_all("undef/cfg", "undef/x", "undef/out", "undef/status"),
            diverge.undefined_uses),
    # h100_cg.npz: cooperative groups (tools/capture/FORMAT_CG.md)
    Handler("cg tiles", with_meta(keys_where(cg.is_tile_key)), cg.tiles),
    Handler("cg reduce/scan", keys_where(cg.is_red_key), cg.reductions),
    Handler("cg partitions", keys_where(cg.is_part_key), cg.partitions),
    # layout.npz, mma_*.npz, capture_extra_{mma,ldst}.npz
    Handler("layout", keys_where(wmma.is_layout_key), wmma.layouts),
    Handler("mma", keys_where(wmma.is_mma_key), wmma.mma_configs),
    Handler("load", keys_where(lambda key: key.startswith("ld/")), wmma.loads),
    Handler("store", keys_where(lambda key: key.startswith("st/")), wmma.stores),
    # ptx_mma*.npz, wgmma*.npz, *_chain.npz
    Handler("ptx/wgmma/chain", keys_where(ptx.is_mma_key), ptx.mma_configs),
    # sp_mma*.npz, sp_chain*.npz, wgsp*.npz (tools/capture/FORMAT_SP.md)
    Handler("sp/wgsp/chain", keys_where(sparse.is_sparse_key), sparse.configs),
    # cvt_fp8.npz, ldmatrix.npz
    Handler("fp8 cvt", keys_where(movcvt.is_cvt_key), movcvt.conversions),
    Handler("ldmatrix/stmatrix/movmatrix", keys_where(movcvt.is_matrix_move_key),
            movcvt.matrix_moves),
    # reference-model files (tools/crosscheck: MMA-Sim), golden/{family}/{arch}/...
    Handler("golden (reference model)", keys_where(golden_keys.is_golden_key),
            golden.configs),
)

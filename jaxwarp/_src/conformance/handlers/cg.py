"""Conformance handlers for the cooperative-groups captures (``h100_cg.npz``).

``tile{N}/*`` (thread_block_tile ranks, votes, matches, shuffles), ``red/{type}/*``
(``cg::reduce`` and the scans), ``part/*`` (coalesced groups and partitions) and ``ex*/*``
(the programming guide's examples), each through ``jaxwarp.cg``. Schema:
``tools/capture/FORMAT_CG.md``.

The models run as ``jax.vmap`` over the trials, dispatched op by op rather than under
``jax.jit``: the trees of a reduction are long chains of soft-float steps, and compiling a
whole program for every (type, group) took minutes each on two CPU cores, where op by op
each primitive compiles once per shape and dtype and serves every tile size and operator
(every group of a type runs on all of its trials, so the shapes are the same). The bits
are the same either way.
"""

from __future__ import annotations

from collections.abc import Iterator

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

from jaxwarp._src.conformance.registry import CaptureError, GroupResult, count
from jaxwarp._src.warp import active, cg, cg_reduce, vote

WARP = 32
RED_DTYPES = {"int32": np.int32, "uint32": np.uint32, "int64": np.int64,
              "uint64": np.uint64, "float32": np.float32, "float64": np.float64,
              "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
RED_RESULTS = ("reduce", "inclusive_scan", "exclusive_scan")
TILE_INFO = ("thread_rank", "meta_group_rank", "num_threads", "meta_group_size", "any", "all",
             "ballot", "match_any", "match_all", "match_all_pred", "match_any64", "invoke_one",
             "sub_meta_group_rank", "sub_meta_group_size")
PART_KINDS = ("coalesced", "labeled", "binary", "labeled_tile32", "binary_tile32",
              "tiled_coalesced")


def _u32(x) -> jax.Array:
    return jnp.asarray(x).astype(jnp.uint32)


def _bits(x: jax.Array) -> jax.Array:
    u = {2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint64}[x.dtype.itemsize]
    return jax.lax.bitcast_convert_type(x, u)


def _lane_set(mask) -> jax.Array:
    return ((jnp.asarray(mask).astype(jnp.uint32) >> jnp.arange(WARP, dtype=jnp.uint32)) & 1) == 1


def is_tile_key(key: str) -> bool:
    """``tile{N}/...`` and ``tile/offs`` keys (the capture's ``meta`` JSON is read by
    ``check.check_file``)."""
    return key.startswith("tile")


def is_example_key(key: str) -> bool:
    """``ex/text`` and ``ex{N}/...``: the programming guide's examples (inputs, outputs,
    the text the H100 printed)."""
    head = key.split("/", 1)[0]
    return head == "ex" or (head.startswith("ex") and head[2:].isdigit())


def examples(d, keys) -> Iterator[GroupResult]:
    """The guide's examples are not run by this command: ``experiments/cg_examples.py``
    runs them and its test compares what they print with ``ex/text`` (the H100's text,
    kept as ``tests/data/h100_cg_examples.txt``). Each example is reported as not
    modelled here, with its element count, so that nothing passes unchecked."""
    for head in sorted({k.split("/", 1)[0] for k in keys}):
        n = sum(int(np.asarray(d[k]).size) for k in keys if k.split("/", 1)[0] == head)
        yield GroupResult(f"cg examples/{head}", 0, n, not_modelled=True,
                          note="the programming guide's example: compared as printed text "
                               "by experiments/cg_examples.py's test, not by this command")


def tiles(d, keys) -> Iterator[GroupResult]:
    """thread_block_tile of every size: ``tile{N}/info`` and the shuffles."""
    offs = [int(v) for v in d["tile/offs"]]
    sizes = sorted({int(k.split("/")[0][4:]) for k in keys if k.split("/")[0][4:].isdigit()})
    for n in sizes:
        xi, xd, pred = d[f"tile{n}/xi"], d[f"tile{n}/xd"], d[f"tile{n}/pred"]
        t = xi.shape[0]
        if xi.shape[1] % WARP:
            raise CaptureError(f"tile{n}/xi has {xi.shape[1]} threads per block; want whole warps")
        nw = xi.shape[1] // WARP
        threads = nw * WARP

        def one(vi, vd, p, w, n=n, threads=threads):
            tile = cg.thread_block_tile(n, threads=threads, warp=w)
            m, mp = tile.match_all(vi)
            if n > 1:
                sub = cg.tiled_partition(tile, n // 2)
                sub_r, sub_s = _u32(sub.meta_group_rank()), _u32(sub.meta_group_size())
            else:
                sub_r = sub_s = jnp.full(WARP, 0xDEADBEEF, jnp.uint32)
            info = jnp.stack([
                _u32(tile.thread_rank()), _u32(tile.meta_group_rank()),
                _u32(tile.num_threads()), _u32(tile.meta_group_size()),
                _u32(tile.any(p)), _u32(tile.all(p)), tile.ballot(p), tile.match_any(vi), m,
                _u32(mp), tile.match_any(vd), tile.ballot(cg_reduce.elected(tile)), sub_r, sub_s,
            ], axis=-1)
            vf = jax.lax.bitcast_convert_type(vi, jnp.float32)
            vdf = jax.lax.bitcast_convert_type(vd, jnp.float64)
            outs = []
            for v, f in ((vi, None), (vf, jnp.uint32), (vdf, jnp.uint64)):
                per_mode = []
                for fn in (tile.shfl, tile.shfl_up, tile.shfl_down, tile.shfl_xor):
                    r = [fn(v, b) for b in offs]
                    per_mode.append(jnp.stack([_bits(x) if f else x for x in r], axis=-1))
                outs.append(jnp.stack(per_mode, axis=-2))
            return info, *outs

        w = np.tile(np.arange(nw, dtype=np.int32), t)
        got = jax.vmap(one)(xi.reshape(-1, WARP), xd.reshape(-1, WARP),
                            pred.reshape(-1, WARP), w)
        got = [np.asarray(g).reshape(t, threads, *g.shape[2:]) for g in got]
        want_info = d[f"tile{n}/info"]
        cols = range(want_info.shape[-1]) if n > 1 else range(12)
        for c in cols:
            m, tot = count(got[0][..., c], want_info[..., c])
            yield GroupResult(f"cg/tile{n}/{TILE_INFO[c]}", m, tot)
        for name, g in zip(("shfl_i32", "shfl_f32", "shfl_f64"), got[1:], strict=True):
            m, tot = count(g, d[f"tile{n}/{name}"])
            yield GroupResult(f"cg/tile{n}/{name}", m, tot)


def is_red_key(key: str) -> bool:
    """``red/{type}/...`` keys."""
    return key.startswith("red/")


def _group_for(code: int, mask) -> cg.Group:
    if code:
        return cg.thread_block_tile(code)
    with active.running(_lane_set(mask)):
        return cg.coalesced_threads()


def reductions(d, keys) -> Iterator[GroupResult]:
    """``cg::reduce`` / ``inclusive_scan`` / ``exclusive_scan`` per type and operator."""
    types = sorted({k.split("/")[1] for k in keys})
    for ty in types:
        if ty not in RED_DTYPES:
            raise CaptureError(f"red/{ty}: unknown type; known: {sorted(RED_DTYPES)}")
        dt = np.dtype(RED_DTYPES[ty])
        cfg, x, want = d[f"red/{ty}/cfg"], d[f"red/{ty}/x"], d[f"red/{ty}/out"]
        ops = cg_reduce.OPS if dt.kind in "iu" else cg_reduce.OPS[:3]
        got = np.zeros_like(want)
        masks, values = cfg[:, 1].astype(np.uint32), x.view(dt)
        for code in sorted({int(c) for c in cfg[:, 0]}):
            if code not in (0, *cg.TILE_SIZES):
                raise CaptureError(f"red/{ty}/cfg has group {code}; known: 0 (coalesced), "
                                   f"{cg.TILE_SIZES}")
            sel = np.flatnonzero(cfg[:, 0] == code)

            def one(m, v, code=code, ops=ops):
                g = _group_for(code, m)
                r = []
                for op in ops:
                    r += [cg_reduce.reduce(g, v, op), cg_reduce.inclusive_scan(g, v, op),
                          cg_reduce.exclusive_scan(g, v, op)]
                return jnp.stack([_bits(a) for a in r], axis=-1)

            # Every trial of the type (same shapes for every group: see the docstring).
            out = np.asarray(jax.vmap(one)(masks, values))
            got[sel, :, : 3 * len(ops)] = out[sel]
        lanes_in = np.where(cfg[:, :1] == 0, np.asarray(_lane_set(cfg[:, 1:2])), True)
        for i, op in enumerate(ops):
            for j, what in enumerate(RED_RESULTS):
                m, tot = count(got[..., 3 * i + j], want[..., 3 * i + j], lanes_in)
                yield GroupResult(f"cg/{what}/{ty}/{op}", m, tot)


def is_part_key(key: str) -> bool:
    """``part/...`` keys."""
    return key.startswith("part/")


def _partition(kind: int, prm: int, lab: jax.Array, p: jax.Array) -> cg.Group:
    """The group of ``part/cfg`` kind ``kind`` (``PART_KINDS``), made in the executing lanes."""
    parent = cg.thread_block_tile(32) if kind in (3, 4) else cg.coalesced_threads()
    if kind in (1, 3):
        return cg.labeled_partition(parent, lab)
    if kind in (2, 4):
        return cg.binary_partition(parent, p)
    if kind == 5:
        return cg.tiled_partition(parent, prm)
    return parent


def partitions(d, keys) -> Iterator[GroupResult]:
    """Coalesced groups and partitions (``part/*``).

    Every kind makes a coalesced group (a per-lane mask and meta ranks), so one program
    serves every trial: it makes the group of each (kind, size) in the file and runs the
    collectives once on the one its trial names (one compile, not one per kind)."""
    cfg, x, label, pred, want = (d[f"part/{k}"] for k in ("cfg", "x", "label", "pred", "out"))
    offs = [int(v) for v in d["part/offs"]]
    made = sorted({(int(r[0]), int(r[2])) for r in cfg})
    for kind, _ in made:
        if not 0 <= kind < len(PART_KINDS):
            raise CaptureError(f"part/cfg has kind {kind}; known: 0..{len(PART_KINDS) - 1}")
    which = np.asarray([made.index((int(r[0]), int(r[2]))) for r in cfg], np.int32)

    def one(m, v, lab, p, i, everyone):
        # Kinds 3 and 4 split a whole-warp tile: every lane executes, whatever the mask.
        with active.running(_lane_set(m) | everyone):
            groups = [_partition(kind, prm, lab, p) for kind, prm in made]
            g = jax.tree.map(lambda *xs: jnp.stack(xs)[i], *groups)
            am = cg.active_mask()
            mm, mp = g.match_all(v & 1)
            vi = jax.lax.bitcast_convert_type(v, jnp.int32)
            vf = jax.lax.bitcast_convert_type(v, jnp.float32)
            cols = [
                _u32(g.num_threads()), _u32(g.thread_rank()), _u32(g.meta_group_rank()),
                _u32(g.meta_group_size()), g.ballot(p), _u32(g.any(p)), _u32(g.all(p)),
                g.match_any(v & 7), mm, _u32(mp),
                _bits(cg_reduce.reduce(g, vi, "plus")),
                _bits(cg_reduce.inclusive_scan(g, vi, "plus")),
                _bits(cg_reduce.exclusive_scan(g, vi, "plus")),
                _bits(cg_reduce.reduce(g, vi, "less")),
                _bits(cg_reduce.reduce(g, vf, "plus")),
                _bits(cg_reduce.inclusive_scan(g, vf, "plus")),
                _bits(cg_reduce.exclusive_scan(g, vf, "plus")),
                vote.ballot_sync(am, cg_reduce.elected(g)),
                jnp.full(WARP, am, jnp.uint32),
            ]
            cols += [g.shfl(v, b) for b in offs]
            cols += [g.shfl_up(v, b) for b in offs]
            cols += [g.shfl_down(v, b) for b in offs]
        return jnp.stack(cols, axis=-1)

    everyone = np.isin(cfg[:, 0], (3, 4))
    got = np.asarray(jax.vmap(one)(cfg[:, 1].astype(np.uint32), x, label, pred, which,
                                   everyone))
    lanes_in = np.asarray(_lane_set(cfg[:, 1:2]))
    names = ("num_threads", "thread_rank", "meta_group_rank", "meta_group_size", "ballot",
             "any", "all", "match_any", "match_all", "match_all_pred", "reduce_plus_i32",
             "inclusive_plus_i32", "exclusive_plus_i32", "reduce_less_i32", "reduce_plus_f32",
             "inclusive_plus_f32", "exclusive_plus_f32", "invoke_one", "activemask")
    spans = [(n, slice(i, i + 1)) for i, n in enumerate(names)]
    k = len(offs)
    spans += [("shfl", slice(19, 19 + k)), ("shfl_up", slice(19 + k, 19 + 2 * k)),
              ("shfl_down", slice(19 + 2 * k, 19 + 3 * k))]
    for kind, kname in enumerate(PART_KINDS):
        rows = cfg[:, 0] == kind
        if not rows.any():
            continue
        for name, s in spans:
            where = (rows[:, None] & lanes_in)[..., None]
            m, tot = count(got[..., s], want[..., s], where)
            yield GroupResult(f"cg/{kname}/{name}", m, tot)

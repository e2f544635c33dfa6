"""Thin instruction front-ends over the arithmetic: WMMA, PTX mma.sync (and .block_scale),
mma.sp, wgmma (and .sp), tcgen05.mma. See docs/architecture.md."""

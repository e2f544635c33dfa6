"""``warp_kernel`` on Pallas' Mosaic GPU backend: a warp program as the threads of a CTA
(``program``: the thread walk; ``kernel``: the kernel and its MLIR emitter)."""

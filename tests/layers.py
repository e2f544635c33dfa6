"""The layer order of ``jaxwarp._src``, read by tests/test_imports.py (with grimp) and
tests/test_walk.py (without it)."""

#: The layers of ``jaxwarp._src``, bottom first. A module may import from its own layer and
#: the layers below it, never from a layer above (function-level imports included). Each
#: entry is a tuple of sibling names that form one layer.
LAYERS = (
    ("checks", "config"),   # argument checks and the switchboard: read by everything
    ("numerics",),          # bits, the format registry, soft-float rounding, conversions
    ("warp",),              # lanes, shuffles, votes, reductions, divergence, cooperative groups
    ("scaling",),           # tensor scales, UE8M0, MX / NVFP4 and blockwise quantization
    ("catalogue",),         # what each instruction accepts; targets and datapath presets
    ("arithmetic",),        # the block-FMA datapath, block scaling, the fused dot
    ("layouts",),           # register fragments, shared memory, ldmatrix
    ("instructions",),      # WMMA, mma.sync, mma.sp, wgmma(.sp), tcgen05 front-ends
    ("gemm",),              # matmul, the block-scaled GEMM and their backends
    ("recipes",),           # MXFP8 / NVFP4 recipes, fp8 delayed scaling
    ("pallas",),            # Pallas kernels: their products as the kernel compiler issues them
    ("emulate",),           # any JAX function's products through the tensor core
    ("sharding",),          # many devices
    ("conformance",),       # capture files, handlers, report, CLI
)

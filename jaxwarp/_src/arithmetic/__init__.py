"""The tensor core's arithmetic: one block-FMA datapath (datapath, datapath_blocks), its
checks, the fp64 and integer datapaths, block scaling and the fused dot. The one home of
rounding above the number formats; it knows nothing of GEMM backends. See
docs/architecture.md."""

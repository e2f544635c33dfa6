"""GEMMs over one instruction family: matmul and the block-scaled GEMM, and the backends
that run their exact k loop (XLA, shared executables, the fused kernel, native mode). See
docs/architecture.md."""

"""The GEMM layer's GPU kernels (Pallas): the fused exact kernel and native mode's kernels
on the Triton and Mosaic GPU backends."""

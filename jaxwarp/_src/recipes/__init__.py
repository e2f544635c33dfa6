"""Training recipes: block-scaled (MXFP8, NVFP4) and fp8 delayed scaling. See
docs/architecture.md."""

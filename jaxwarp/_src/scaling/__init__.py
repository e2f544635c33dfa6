"""Scales and block quantization above the number formats: power-of-two tensor scales,
UE8M0, MX / NVFP4 quantization and fp8 blockwise quantization. See docs/architecture.md."""

"""Pallas kernels on the emulated tensor core."""

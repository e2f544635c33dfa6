"""Test configuration.

Strict dtype promotion is on everywhere, so an implicit promotion in the library
fails loudly. 64-bit mode stays off (a user's default); tests of 64-bit features
turn it on locally with ``jax.enable_x64(True)``.
"""

import pathlib

import jax
import numpy as np
import pytest

jax.config.update("jax_numpy_dtype_promotion", "strict")

DATA = pathlib.Path(__file__).parent / "data"


def load_capture(name: str):
    """Loads tests/data/h100_{name}.npz (a subset of the H100 captures)."""
    return np.load(DATA / f"h100_{name}.npz")


@pytest.fixture(scope="session")
def warp_capture():
    return load_capture("warp")


@pytest.fixture(scope="session")
def layout_capture():
    return load_capture("layout")


@pytest.fixture(scope="session")
def mma_fp_capture():
    return load_capture("mma_fp")


@pytest.fixture(scope="session")
def mma_int_capture():
    return load_capture("mma_int")

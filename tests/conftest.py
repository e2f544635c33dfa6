import os
import pathlib

import jax
import pytest

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_dtype_promotion", "strict")

DATA = pathlib.Path(__file__).parent / "data"
SHARED = pathlib.Path(__file__).resolve().parents[2] / "shared" / "hw" / "h100"


@pytest.fixture(scope="session")
def data_dir():
    return DATA

"""Test configuration.

Strict dtype promotion is on everywhere, so an implicit promotion in the library
fails loudly. 64-bit mode stays off (a user's default); tests of 64-bit features
turn it on locally with ``jax.enable_x64(True)``.

Long tests (the largest capture file, the studies, models trained through ``emulate``,
long property runs, more parametrizations of a rule the default run covers) carry
``@pytest.mark.slow`` and are left out of a run without ``-m``, unless named by their id
(``path::test``); ``python -m pytest -n auto -m slow`` runs them, and
``-m "slow or not slow"`` runs everything.
"""

import pathlib

import jax
import numpy as np
import pytest

jax.config.update("jax_numpy_dtype_promotion", "strict")

DATA = pathlib.Path(__file__).parent / "data"


def pytest_collection_modifyitems(config, items):
    """Leaves the tests marked slow out of the default run (see the module doc)."""
    if config.option.markexpr or any("::" in arg for arg in config.args):
        return
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if item.get_closest_marker("slow") is None]


def fast_dot_rounding() -> str:
    """How the default backend's f16/bf16 ``dot_general`` with fp32 accumulation (what
    ``matmul(..., mode="fast")`` runs) adds its products, for tests of fast mode.

    Returns:
      ``"nearest"`` on a CPU: XLA's CPU dot accumulates in fp32, rounding to nearest, so
      fast mode is not the tensor core's truncating sum. ``"tensor_core"`` on an NVIDIA
      GPU of compute capability 9.x (H100, H200): XLA runs the dot on the tensor cores,
      whose bits the exact model gives (measured for K up to 256 and these tests' sizes).

    Any other backend (another GPU generation, TPU) is not known: the test is skipped
    with a reason that names the device.
    """
    dev = jax.devices()[0]
    if dev.platform == "cpu":
        return "nearest"
    cc = str(getattr(dev, "compute_capability", ""))
    if dev.platform == "gpu" and "nvidia" in dev.device_kind.lower() and cc.startswith("9."):
        return "tensor_core"
    pytest.skip(f"fast mode's rounding is known only on a CPU and on NVIDIA compute "
                f"capability 9.x; this is {dev.platform} {dev.device_kind!r} "
                f"(compute capability {cc or 'unknown'})")


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

"""emulate's log lines for the phases of a first call (the "jaxwarp" logger)."""

import logging

import jax
import jax.numpy as jnp

import jaxwarp


def _messages(caplog, level):
    return [r.getMessage() for r in caplog.records
            if r.name == "jaxwarp" and r.levelno == level]


def test_first_call_logs_one_line_per_phase(caplog):
    f = jaxwarp.emulate(lambda x, w: jnp.tanh(x @ w).sum(), operand_format="bf16",
                        mode="fast")
    x, w = jnp.ones((16, 32)), jnp.full((32, 8), 0.5)
    step = jax.jit(jax.grad(f, argnums=1))
    with caplog.at_level(logging.INFO, logger="jaxwarp"):
        step(x, w).block_until_ready()
    info = _messages(caplog, logging.INFO)
    assert any("emulate traced" in m and "1 forward products" in m for m in info), info
    assert any(m.startswith("jaxwarp: lowered") and "XLA compiles it now" in m
               for m in info), info
    assert any(m.startswith("jaxwarp: XLA compiled") for m in info), info
    assert not _messages(caplog, logging.WARNING)  # short phases: no warning
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="jaxwarp"):
        step(x, w).block_until_ready()  # cached: nothing traced, nothing logged
    assert not [r for r in caplog.records if r.name == "jaxwarp"]


def test_a_long_phase_is_a_warning(monkeypatch, caplog):
    from jaxwarp._src.emulate import progress

    monkeypatch.setattr(progress, "LONG_PHASE_S", 0.0)
    f = jaxwarp.emulate(lambda x, w: x @ w, operand_format="bf16", mode="fast")
    with caplog.at_level(logging.WARNING, logger="jaxwarp"):
        jax.jit(f)(jnp.ones((16, 48)), jnp.ones((48, 8))).block_until_ready()
    warn = _messages(caplog, logging.WARNING)
    assert any("emulate traced" in m for m in warn), warn
    assert any("XLA compiles it now" in m for m in warn), warn

"""The ``options`` fixture: jaxwarp.config options for the rest of one test."""

from __future__ import annotations

import contextlib

import pytest

import jaxwarp


@pytest.fixture
def options():
    """``options(name=value, ...)`` sets jaxwarp.config options (``jaxwarp.config.override``)
    until the test ends; a later call overrides an earlier one."""
    with contextlib.ExitStack() as stack:
        yield lambda **values: stack.enter_context(jaxwarp.config.override(**values))

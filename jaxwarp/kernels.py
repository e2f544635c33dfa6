"""Pallas kernels on the emulated tensor core (docs/kernels.md).

``triton_matmul`` is an example Triton-style Pallas matmul (the kernel the capture tool
records on a GPU); ``target_sm_count`` gives a Mosaic GPU kernel that asks the device for
its SM count the target's number on a machine without that GPU. Any Pallas kernel runs
with the target's bits under ``jaxwarp.emulate(fn, arch="sm_90a")``.
"""

from jaxwarp._src.pallas.examples import FORMS as FORMS
from jaxwarp._src.pallas.examples import triton_matmul as triton_matmul
from jaxwarp._src.pallas.mosaic_gpu import target_sm_count as target_sm_count

# The public names: what ``help()``, ``pydoc`` and ``from ... import *`` list (the
# re-exports above; a test checks the two agree).
__all__ = sorted(_n for _n in dir() if not _n.startswith("_"))

"""``python -m jaxwarp.conformance FILE.npz [...] [--json PATH] [--backend cpu|gpu]``.

Reads capture files (schemas: ``docs/capture_format.md``, ``tools/capture/FORMAT_*.md``),
runs the model on the recorded inputs and prints, per file, a table of every group
(config, elements, exact, %) with a subtotal per family, then
``conformance: M/N bit-exact (P%)``. Percentages are rounded down: 100% only when every
element matched. Exit status 0 only when everything matched, 1 on a mismatch, 2 on an
error (unreadable or empty file, unknown key or mode, a group with zero trials, a size
from the file beyond what the instruction allows, a configuration the model cannot run
yet or the capture's GPU cannot issue) or when a configuration is not modelled in this
version (listed ``NOT MODELLED`` with its element count). Reference-model files
(``golden/...`` keys, outputs of MMA-Sim written by ``tools/crosscheck``) are reported
as "matches MMA-Sim (reference model)", apart from "matches hardware". See
``docs/conformance.md``.
"""

from jaxwarp._src.conformance.check import check_file as check_file
from jaxwarp._src.conformance.cli import main as main
from jaxwarp._src.conformance.handlers.ptx import datapath_lacks as datapath_lacks
from jaxwarp._src.conformance.registry import CaptureError as CaptureError
from jaxwarp._src.conformance.registry import GroupResult as GroupResult
from jaxwarp._src.conformance.registry import floor_percent as floor_percent

# The public names: what ``help()``, ``pydoc`` and ``from ... import *`` list (the
# re-exports above; a test checks the two agree).
__all__ = sorted(_n for _n in dir() if not _n.startswith("_"))

if __name__ == "__main__":
    raise SystemExit(main())

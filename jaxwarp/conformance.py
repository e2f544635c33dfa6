"""``python -m jaxwarp.conformance FILE.npz [...] [--json PATH]``: bits against a GPU.

Reads capture files in the schema of ``docs/capture_format.md``, runs the model on the
recorded inputs and prints one line per group with matched/total elements, then
``conformance: M/N bit-exact (P%)``. Exit status 0 only when everything matches,
1 on a mismatch, 2 when a file cannot be read.
"""

from jaxwarp._src.conformance.cli import CaptureError as CaptureError
from jaxwarp._src.conformance.cli import GroupResult as GroupResult
from jaxwarp._src.conformance.cli import check_file as check_file
from jaxwarp._src.conformance.cli import main as main

if __name__ == "__main__":
    raise SystemExit(main())

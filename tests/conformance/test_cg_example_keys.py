"""The guide examples' raw keys in a cooperative-groups capture are reported, not passed."""

import numpy as np

from jaxwarp._src.conformance import check


def test_example_keys_are_not_modelled_and_never_pass(tmp_path):
    path = tmp_path / "cg.npz"
    np.savez(path, device=np.array("NVIDIA H100 80GB HBM3 sm_90"),
             **{"ex/text": np.array("hello"), "ex0/x": np.arange(32, dtype=np.int32),
                "ex0/oi": np.zeros(32, np.int32)})
    results, _ = check.check_file(str(path))
    got = {r.group: (r.matched, r.total, r.not_modelled, r.ok) for r in results}
    assert got == {"cg examples/ex": (0, 1, True, False),
                   "cg examples/ex0": (0, 64, True, False)}, got

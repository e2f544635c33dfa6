"""WMMA with f16 operands, an fp32 C and an f16 D (``f16.f32f16``) on the H100.

tests/data/h100_f16d_probe.npz (tools/capture/probe_f16d.py) holds sums drawn on and next
to f16 rounding points (tiny operands, sums within fp32 ulps of an f16 midpoint, a midpoint
plus a far smaller term, tiny fp32 C), each run as ``f16.f32f16`` and ``f16.f32f32`` on
the same inputs: the trials where the earlier model (blocks summing into f16's range, a
floor of 2**-21) differed, and a few of each kind.
"""

import numpy as np
from conftest import DATA

from jaxwarp import conformance

PROBE = DATA / "h100_f16d_probe.npz"


def test_hardware_f16_d_is_the_fp32_d_rounded_to_nearest_even():
    z = np.load(PROBE)
    for shape in ("m16n16k16", "m32n8k16", "m8n32k16"):
        d16 = z[f"f16.f32f16.{shape}.rc/D"]
        d32 = z[f"f16.f32f32.{shape}.rc/D"].view(np.float32)
        np.testing.assert_array_equal(d16, d32.astype(np.float16).view(np.uint16))
        # the rule is visible here: RZ of the same fp32 D would differ
        rz = np.where(np.abs(d32.astype(np.float16).astype(np.float32)) > np.abs(d32),
                      np.nextafter(d32.astype(np.float16), np.float16(0)),
                      d32.astype(np.float16)).view(np.uint16)
        assert (rz != d16).any()


def test_model_is_bit_exact_on_a_part_of_the_probe(tmp_path):
    z = np.load(PROBE)
    part = tmp_path / "part.npz"
    np.savez(part, **{k: (z[k] if k == "device" else z[k][:12]) for k in z.files})
    results, device = conformance.check_file(str(part))
    assert "H100" in device and len(results) == 6
    bad = [r for r in results if not r.ok]
    assert not bad, "\n".join(f"{r.group}: {r.matched}/{r.total} {r.note}" for r in bad)

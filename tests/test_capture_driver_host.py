"""tools/capture/driver.py on the host (no GPU, no nvcc): the -arch choice, the build
cache's key, and building a generated table without the configurations ptxas refuses."""

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tools" / "capture"))
import driver  # noqa: E402


@pytest.mark.parametrize("given,want", [("90a", "sm_90a"), ("sm_80", "sm_80"),
                                        ("native", "native"), ("compute_90a", "compute_90a")])
def test_arch_flag_from_the_option(given, want):
    assert driver.gpu_arch(given) == want
    assert driver.gpu_arch(given, arch_specific=True) == want


def test_source_key_reads_every_part():
    key = driver.source_key(b"src", "-arch=sm_90a")
    assert len(key) == 16 and int(key, 16) >= 0
    assert key == driver.source_key(b"src", "-arch=sm_90a")
    assert key != driver.source_key(b"src", "-arch=sm_80")
    assert key != driver.source_key(b"src2", "-arch=sm_90a")


class _Cfg:
    def __init__(self, name):
        self.name = name


def test_table_is_built_without_what_ptxas_refuses(tmp_path):
    cfgs = [_Cfg("good1"), _Cfg("bad"), _Cfg("good2")]
    calls = []

    def compile_cfgs(cs, out, cubin):
        names = [c.name for c in cs]
        calls.append((names, cubin))
        if "bad" in names:
            return 1, "ptxas x.ptx, line 9; error   : Unknown modifier '.m16n8k99'\nmore"
        pathlib.Path(out).write_bytes(b"lib")
        return 0, ""

    lib = tmp_path / "libt.so"
    kept, bad = driver.build_table("t", lib, cfgs, compile_cfgs, sys.executable, "t_")
    assert [c.name for c in kept] == ["good1", "good2"]
    assert bad == {"bad": "ptxas x.ptx, line 9; error   : Unknown modifier '.m16n8k99'"}
    assert lib.read_bytes() == b"lib"
    # The whole table, then each alone as a cubin, then the table without the refused one.
    assert calls[0] == (["good1", "bad", "good2"], False)
    assert sorted(n for n, cubin in calls[1:4] if cubin) == [["bad"], ["good1"], ["good2"]]
    assert calls[-1] == (["good1", "good2"], False)
    # A build that exists is reused as it is.
    calls.clear()
    assert driver.build_table("t", lib, cfgs, compile_cfgs, sys.executable, "t_") == (cfgs, {})
    assert calls == []

"""What the capture tools' drivers share: building a CUDA library with nvcc (a cache keyed
by its sources, ptxas probed configuration by configuration when a generated table does
not assemble), loading it with ctypes and asking the GPU its name, and the common options.

The libraries (``warpcap.cu``, ``ptxmma.cu``, ``sp.cu``, ``movcvt.cu``, ``cg.cu``,
``wgmma.cu``) include ``common.cuh`` and export ``{prefix}_last_error``
and ``{prefix}_device``; ``load`` reads them. Nothing here touches the captured values.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import multiprocessing as mp
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

HERE = pathlib.Path(__file__).resolve().parent
BUILD = HERE / "build"
COMMON = HERE / "common.cuh"
#: nvcc flags of every shared library (the -arch flag and include folders come apart).
LIB_FLAGS = ("-O2", "-std=c++17", "-shared", "-Xcompiler", "-fPIC")


def log(*a):
    print(*a, flush=True)


def gpu_arch(override: str | None, arch_specific: bool = False) -> str:
    """The nvcc -arch value: ``override`` (``90a`` -> ``sm_90a``) if given, else the first
    GPU's compute capability (``sm_90a`` for 9.0/10.0/10.3 when ``arch_specific``), else
    ``native`` (nvcc asks the driver)."""
    if override:
        return override if override.startswith(("sm_", "native", "compute_")) else f"sm_{override}"
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout
        cap = out.split()[0].strip().replace(".", "")
        return f"sm_{cap}a" if arch_specific and cap in ("90", "100", "103") else f"sm_{cap}"
    except Exception:  # no nvidia-smi: let nvcc ask the driver
        return "native"


def require_nvcc(nvcc: str) -> None:
    """Exits with a message when ``nvcc`` is not on the PATH."""
    if shutil.which(nvcc) is None:
        sys.exit(f"nvcc not found (looked for {nvcc!r}); install the CUDA toolkit")


def source_key(*parts: bytes | str) -> str:
    """16 hex digits of a hash over ``common.cuh`` and ``parts`` (a library's sources, its
    generated table, its flags): the build cache's key."""
    h = hashlib.sha256(COMMON.read_bytes())
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
    return h.hexdigest()[:16]


def nvcc(src: pathlib.Path, out: pathlib.Path, flags: Iterable[str], nvcc: str = "nvcc",
         cubin: bool = False, include: Iterable[pathlib.Path] = ()) -> tuple[int, str]:
    """Compiles ``src`` to a shared library (or, with ``cubin``, only assembles its device
    code: what ptxas accepts). ``flags`` are the -arch/-gencode flags and any more; the
    shared-library flags are added here. Returns (exit status, compiler messages)."""
    inc = [f"-I{d}" for d in (HERE, *include)]
    kind = ["-cubin"] if cubin else list(LIB_FLAGS[2:])
    cmd = [nvcc, *LIB_FLAGS[:2], *flags, *inc, *kind, "-o", str(out), str(src)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    return r.returncode, (r.stderr + r.stdout).strip()


def nvcc_table(src: pathlib.Path, inc_name: str, inc_text: str, out: pathlib.Path,
               flags: Iterable[str], nvcc_path: str = "nvcc", cubin: bool = False
               ) -> tuple[int, str]:
    """``nvcc`` of a library whose instruction table is generated: ``inc_text`` is written as
    ``inc_name`` into a fresh folder on the include path for this one compile."""
    BUILD.mkdir(exist_ok=True)
    d = pathlib.Path(tempfile.mkdtemp(prefix=f"{src.stem}_", dir=BUILD))
    try:
        (d / inc_name).write_text(inc_text)
        return nvcc(src, out, flags, nvcc_path, cubin, include=(d,))
    finally:
        shutil.rmtree(d, ignore_errors=True)


def build_lib(src: pathlib.Path, name: str, arch: str, nvcc_path: str = "nvcc") -> pathlib.Path:
    """Compiles ``src`` for ``arch`` with -lineinfo unless an up-to-date build exists;
    raises on a compile error (the compiler's messages go to the terminal)."""
    flags = [f"-arch={arch}", "-lineinfo"]
    BUILD.mkdir(exist_ok=True)
    lib = BUILD / f"lib{name}_{arch}_{source_key(src.read_bytes(), ' '.join(flags))}.so"
    if lib.exists():
        return lib
    require_nvcc(nvcc_path)
    cmd = [nvcc_path, *LIB_FLAGS, *flags, f"-I{HERE}", "-o", str(lib), str(src)]
    log("building:", " ".join(cmd))
    t = time.time()
    subprocess.run(cmd, check=True)
    log(f"built in {time.time() - t:.0f} s")
    return lib


def probe_ptxas(cfgs, compile_one: Callable[[object, pathlib.Path], tuple[int, str]],
                tag: str, jobs: int = 8) -> dict[str, str]:
    """{name: first error line} of the configurations (objects with ``.name``) whose
    instruction ptxas refuses, each assembled alone: ``compile_one(cfg, cubin path)``."""
    BUILD.mkdir(exist_ok=True)

    def one(c):
        out = BUILD / f"probe_{tag}{hashlib.sha1(c.name.encode()).hexdigest()[:10]}.cubin"
        rc, msg = compile_one(c, out)
        out.unlink(missing_ok=True)
        lines = [ln for ln in msg.splitlines() if "error" in ln.lower()]
        return c.name, (None if rc == 0 else (lines[0] if lines else msg[:300]))

    with ThreadPoolExecutor(jobs) as ex:
        res = list(ex.map(one, cfgs))
    return {n: e for n, e in res if e is not None}


def build_table(what: str, lib: pathlib.Path, cfgs: list, compile_cfgs, nvcc_path: str,
                tag: str) -> tuple[list, dict[str, str]]:
    """Builds the library ``lib`` of a generated instruction table unless it exists.

    ``compile_cfgs(cfgs, out, cubin)`` compiles a table of ``cfgs``. When the whole table
    does not build, every configuration is assembled alone (``probe_ptxas``) and the
    library is built without the ones ptxas refuses. Returns (configurations in the
    library, {name: why refused}).
    """
    if lib.exists():
        return cfgs, {}
    require_nvcc(nvcc_path)
    t = time.time()
    log(f"building {what} ({len(cfgs)} configurations)")
    rc, msg = compile_cfgs(cfgs, lib, False)
    bad: dict[str, str] = {}
    if rc != 0:
        log(f"full build failed ({msg[:400]}); probing every configuration alone")
        bad = probe_ptxas(cfgs, lambda c, out: compile_cfgs([c], out, True), tag)
        for n, e in bad.items():
            log(f"  rejected {n}: {e}")
        cfgs = [c for c in cfgs if c.name not in bad]
        rc, msg = compile_cfgs(cfgs, lib, False)
        if rc != 0:
            raise RuntimeError(f"{what} build failed: {msg[:2000]}")
    log(f"built in {time.time() - t:.0f} s")
    return cfgs, bad


def print_probe(cfgs, bad: dict[str, str], width: int = 48) -> int:
    """The ``--probe-ptxas`` report: every configuration, ok or why refused."""
    for c in cfgs:
        log(f"{c.name:{width}s} {'REJECTED: ' + bad[c.name] if c.name in bad else 'ok'}   "
            f"[{c.ptx()}]")
    log(f"{len(cfgs) - len(bad)} accepted, {len(bad)} rejected")
    return 0


class Device:
    """The GPU a library runs on (``{prefix}_device``): name, compute capability, the CUDA
    runtime and driver versions."""

    def __init__(self, L: ctypes.CDLL, prefix: str):
        last_error = getattr(L, f"{prefix}_last_error")
        last_error.restype = ctypes.c_char_p
        name = ctypes.create_string_buffer(256)
        ints = [ctypes.c_int() for _ in range(4)]
        if getattr(L, f"{prefix}_device")(name, 256, *[ctypes.byref(i) for i in ints]) != 0:
            raise RuntimeError(last_error().decode())
        self.name = name.value.decode()
        self.major, self.minor, self.runtime, self.driver = (i.value for i in ints)
        self.cc = self.major * 10 + self.minor

    def __str__(self) -> str:
        """``NVIDIA H100 80GB HBM3 sm_90``: the captures' ``device`` string."""
        return f"{self.name} sm_{self.major}{self.minor}"


def load(path: pathlib.Path, prefix: str) -> tuple[ctypes.CDLL, Device]:
    """Loads a capture library and asks it for the GPU."""
    L = ctypes.CDLL(str(path))
    return L, Device(L, prefix)


def checker(L: ctypes.CDLL, prefix: str) -> Callable[[int], None]:
    """``check(rc)``: raises RuntimeError with the library's last error when rc != 0."""
    last_error = getattr(L, f"{prefix}_last_error")
    last_error.restype = ctypes.c_char_p

    def check(rc: int) -> None:
        if rc != 0:
            raise RuntimeError(last_error().decode())
    return check


def add_common_args(ap: argparse.ArgumentParser, *, out_default=None, out_type=pathlib.Path,
                    out_help=None, scale_type=float, scale_default=1.0,
                    scale_help="multiplies every trial count", arch: str | None = "none",
                    arch_help=None) -> None:
    """--out, --seed, --scale, --arch (unless ``arch`` is ``"none"``) and --nvcc, as every
    capture tool spells them."""
    ap.add_argument("--out", type=out_type, default=out_default, help=out_help)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scale", type=scale_type, default=scale_default, help=scale_help)
    if arch != "none":
        ap.add_argument("--arch", default=arch, help=arch_help)
    ap.add_argument("--nvcc", default="nvcc")


# ----------------------------------------------------------------------------------------
# The worker process (a configuration that hangs or faults is killed, the rest go on).


def _worker(conn, factory, fargs):
    try:
        lib = factory(*fargs)
        conn.send(("ok", lib.device))
    except Exception as e:  # noqa: BLE001
        conn.send(("err", f"{type(e).__name__}: {e}"))
        return
    while True:
        job = conn.recv()
        if job is None:
            return
        try:
            conn.send(("ok", lib.run(*job)))
        except Exception as e:  # noqa: BLE001
            conn.send(("err", f"{type(e).__name__}: {e}"))


class Runner:
    """Runs `factory(*fargs).run(*job)` in a worker process, each job with a time limit; a
    job that times out or fails with a CUDA error kills the worker (the next job starts a
    fresh one)."""

    def __init__(self, factory, fargs, limit):
        self.factory, self.fargs, self.limit = factory, fargs, limit
        self.proc = None
        self.device = None

    def _start(self):
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child, self.factory, self.fargs), daemon=True)
        self.proc.start()
        st, v = ("err", "worker did not start in 120 s")
        try:
            if self.conn.poll(120):
                st, v = self.conn.recv()
        except EOFError:
            st, v = "err", "worker died while starting"
        if st != "ok":
            self._kill()
            raise RuntimeError(v)
        self.device = v

    def _kill(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.join()
        self.proc = None

    def run(self, *job):
        if self.proc is None or not self.proc.is_alive():
            self._start()
        try:
            self.conn.send(job)
            if not self.conn.poll(self.limit):
                self._kill()
                raise TimeoutError(f"no answer in {self.limit} s (worker killed)")
            st, v = self.conn.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError):
            self._kill()
            raise RuntimeError("worker died") from None
        if st != "ok":
            self._kill()  # a CUDA error poisons the context: start afresh
            raise RuntimeError(v)
        return v

    def close(self):
        if self.proc is not None and self.proc.is_alive():
            self.conn.send(None)
            self.proc.join(10)

"""The optional C kernels of the LN-LSTM / LN-GRU (``_rnn_steps.c``: each cell's whole forward
and backward time loops): built on first use, cached.

Plain C with no torch headers, compiled with the system C compiler in well under a second (a
torch C++ extension takes a minute), cached per source / compiler / CPU under
``$LAYERNORM_CACHE`` (default ``~/.cache/layernorm``) so later processes only load it, and called
through ctypes. ``load()`` returns None whenever anything fails (no compiler, read-only cache,
unsupported platform) or ``LAYERNORM_NATIVE=0`` is set; callers then use torch ops.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

_SOURCE = Path(__file__).with_name("_rnn_steps.c")
_FLAGS = ["-O3", "-march=native", "-fno-math-errno", "-fno-trapping-math", "-shared", "-fPIC"]
# OpenMP threads over the batch rows (libgomp is torch's own, already loaded); compilers without
# OpenMP support get the single-threaded build.
_OMP_FLAGS = (["-fopenmp"], ["-fopenmp-simd"], [])
_lib = None
_tried = False


def _cache_dir() -> Path:
    root = os.environ.get("LAYERNORM_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "layernorm")
    return Path(root)


def _cpu_signature() -> str:
    """-march=native code must not be loaded on another CPU: key the cache on its flags."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return line
    except OSError:
        pass
    return platform.processor() or platform.machine()


def compiler() -> str | None:
    """The C compiler to use: $CC, else cc / gcc / clang on the PATH, else None."""
    return (os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
            or shutil.which("clang"))


def _build(cc: str, target: Path, extra: tuple[str, ...] = ()) -> None:
    """Compile the kernels into ``target`` (``extra``: more compiler flags, e.g. for tests)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        for i, omp in enumerate(_OMP_FLAGS):
            try:
                subprocess.run([cc, *_FLAGS, *omp, *extra, str(_SOURCE), "-o", tmp, "-lm"],
                               check=True, capture_output=True, timeout=60)
                break
            except subprocess.CalledProcessError:
                if i == len(_OMP_FLAGS) - 1:
                    raise
        os.replace(tmp, target)  # atomic: concurrent builders never see a partial file
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _declare(lib) -> None:
    i, p, size = ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t
    lib.panel_width.argtypes = []
    lib.panel_width.restype = i
    lib.gemm_packed.argtypes = [i, i, p, p, i, p]
    lib.gemm_packed.restype = None
    for cell in ("lstm", "gru"):
        for kernel in ("forward_seq", "backward_seq"):
            f = getattr(lib, f"{cell}_{kernel}")
            f.argtypes = [p]  # a pointer to the cell's struct (_driver.LSTMArgs / GRUArgs)
            f.restype = i
        for what in ("struct_size", "struct_last"):
            f = getattr(lib, f"{cell}_{what}")
            f.argtypes = []
            f.restype = size
    from ._driver import check_layout
    check_layout(lib)


def load():
    """The loaded library, or None (then use the torch-ops path)."""
    global _lib, _tried
    if _tried:
        return _lib
    _tried = True
    if os.environ.get("LAYERNORM_NATIVE", "1") == "0" or os.name != "posix":
        return None
    cc = compiler()
    if not cc:
        return None
    try:
        key = hashlib.sha256(_SOURCE.read_bytes() + " ".join([cc, *_FLAGS, "omp"]).encode()
                             + _cpu_signature().encode()).hexdigest()[:16]
        target = _cache_dir() / f"rnn_steps-{key}.so"
        if not target.exists():
            _build(cc, target)
        lib = ctypes.CDLL(str(target))
        _declare(lib)
        _lib = lib
    except Exception:  # noqa: BLE001 - any failure means "use torch ops"
        _lib = None
    return _lib

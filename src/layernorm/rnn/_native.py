"""The optional C kernels of the LN-LSTM / LN-GRU (``_rnn_steps.c``: each cell's whole forward
and backward time loops): built on first use, cached, verified before every load.

Plain C with no torch headers, compiled with the system C compiler in well under a second (a
torch C++ extension takes a minute), cached per source / compiler / CPU under
``$LAYERNORM_CACHE`` (default ``~/.cache/layernorm``) so later processes only load it, and called
through ctypes. The cache is a trusted build: the library is compiled into a temporary file and
renamed into place atomically, its SHA-256 is written beside it (``.sha256``), and before every
load the file must be a regular file owned by this user, not writable by others, with that
checksum. A damaged, foreign or unloadable file is rebuilt once, with one warning naming the
cause. ``load()`` returns None when the kernels cannot be had (no compiler, a compiler that fails
or hangs past ``COMPILE_TIMEOUT``, no writable directory): callers then use torch ops, and one
warning per process says why. ``LAYERNORM_NATIVE=0`` turns the kernels off silently.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shlex
import shutil
import stat
import subprocess
import tempfile
import warnings
from pathlib import Path

_SOURCE = Path(__file__).with_name("_rnn_steps.c")
_FLAGS = ["-O3", "-march=native", "-fno-math-errno", "-fno-trapping-math", "-shared", "-fPIC"]
# OpenMP threads over the batch rows (libgomp is torch's own, already loaded); compilers without
# OpenMP support get the single-threaded build.
_OMP_FLAGS = (["-fopenmp"], ["-fopenmp-simd"], [])
COMPILE_TIMEOUT = 60.0  # seconds one compiler run may take
_lib = None
_tried = False
_FIX = ("set CC to a working C compiler (e.g. CC=gcc) and LAYERNORM_CACHE to a writable "
        "directory, or LAYERNORM_NATIVE=0 to use torch ops without this message")


class NativeKernelWarning(RuntimeWarning):
    """The C kernels were rebuilt, or are unavailable and torch ops are used instead."""


class _Unavailable(Exception):
    pass


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
    """The C compiler command to use: $CC (may carry arguments, e.g. ``gcc -O2``), else cc / gcc
    / clang on the PATH, else None."""
    return (os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
            or shutil.which("clang"))


def _build(cc: str, target: Path, extra: tuple[str, ...] = ()) -> None:
    """Compile the kernels into ``target`` atomically (``extra``: more compiler flags, e.g. for
    tests) and write its checksum beside it. Raises ``_Unavailable`` saying why it failed."""
    cmd = shlex.split(cc)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so.tmp", dir=target.parent)
    os.close(fd)
    try:
        for i, omp in enumerate(_OMP_FLAGS):
            try:
                subprocess.run([*cmd, *_FLAGS, *omp, *extra, str(_SOURCE), "-o", tmp, "-lm"],
                               check=True, capture_output=True, timeout=COMPILE_TIMEOUT)
                break
            except subprocess.CalledProcessError as e:
                if i == len(_OMP_FLAGS) - 1:
                    err = e.stderr.decode(errors="replace").strip().splitlines()[-1:] or [""]
                    raise _Unavailable(f"the C compiler {cc!r} failed (exit {e.returncode}: "
                                       f"{err[0][:200]})") from None
            except subprocess.TimeoutExpired:
                raise _Unavailable(f"the C compiler {cc!r} did not finish within "
                                   f"{COMPILE_TIMEOUT:g} s") from None
            except OSError as e:
                raise _Unavailable(f"the C compiler {cc!r} could not be run ({e})") from None
        os.chmod(tmp, 0o755)
        digest = _sha256(Path(tmp))
        os.replace(tmp, target)  # atomic: concurrent builders never see a partial file
        _write_atomic(_checksum_path(target), digest + "\n")
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _checksum_path(target: Path) -> Path:
    return target.with_name(target.name + ".sha256")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _problem(target: Path) -> str | None:
    """Why ``target`` must not be loaded, or None when it is our verified build."""
    try:
        st = os.lstat(target)
    except (FileNotFoundError, NotADirectoryError):  # (the cache path may be a file)
        return "missing"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file (a directory or a link is in its place)"
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return "is owned by another user"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "is writable by other users"
    try:
        expected = _checksum_path(target).read_text().strip()
    except OSError:
        return "has no checksum file beside it (not built by this loader)"
    if _sha256(target) != expected:
        return "does not match its recorded SHA-256 (damaged or replaced)"
    return None


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _writable_dir(root: Path) -> Path:
    """``root`` when it is (or can be made) a writable directory, else a fresh temporary one
    (with a warning)."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=root, prefix=".probe-")
        probe.close()
        return root
    except OSError as e:
        tmp = Path(tempfile.mkdtemp(prefix="layernorm-kernels-"))
        warnings.warn(f"layernorm: the kernel cache {root} is not a writable directory ({e}); "
                      f"building the C kernels in {tmp} for this process. Fix: set "
                      f"LAYERNORM_CACHE to a writable directory.", NativeKernelWarning,
                      stacklevel=4)
        return tmp


def _open(target: Path):
    lib = ctypes.CDLL(str(target))
    _declare(lib)
    return lib


def _load_or_build(cc: str):
    key = hashlib.sha256(_SOURCE.read_bytes() + " ".join([cc, *_FLAGS, "omp"]).encode()
                         + _cpu_signature().encode()).hexdigest()[:16]
    name = f"rnn_steps-{key}.so"
    target = _cache_dir() / name
    problem = _problem(target)
    if problem is None:
        try:
            return _open(target)
        except (OSError, AttributeError, RuntimeError) as e:
            problem = f"could not be loaded ({e})"
    if problem != "missing":
        warnings.warn(f"layernorm: the cached C kernels {target} {problem}; rebuilding them. "
                      f"If this repeats, delete {target.parent}.", NativeKernelWarning,
                      stacklevel=4)
    root = _writable_dir(target.parent)
    target = root / name
    if problem != "missing" and root == _cache_dir():
        try:
            _remove(target)
        except OSError:
            pass
    _build(cc, target)
    if _problem(target) is not None:
        raise _Unavailable(f"the freshly built {target} failed verification "
                           f"({_problem(target)})")
    try:
        return _open(target)
    except (OSError, AttributeError, RuntimeError) as e:
        raise _Unavailable(f"the freshly built {target} could not be loaded ({e})") from None


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
    """The loaded library, or None (then use the torch-ops path; one warning says why)."""
    global _lib, _tried
    if _tried:
        return _lib
    _tried = True
    if os.environ.get("LAYERNORM_NATIVE", "1") == "0":
        return None
    reason = None
    if os.name != "posix":
        reason = "they are built only on POSIX systems"
    elif not compiler():
        reason = "no C compiler was found ($CC, cc, gcc, clang)"
    else:
        try:
            _lib = _load_or_build(compiler())
        except _Unavailable as e:
            reason = str(e)
        except OSError as e:
            reason = f"the kernel cache could not be used ({e})"
    if reason is not None:
        warnings.warn(f"layernorm: the LN-LSTM/GRU C kernels are unavailable: {reason}. Using "
                      f"the torch-ops path (2-3x slower). Fix: {_FIX}.", NativeKernelWarning,
                      stacklevel=3)
    return _lib

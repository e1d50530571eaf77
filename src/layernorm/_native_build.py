"""The trusted build of the project's small C kernels: compiled on first use, cached, verified
before every load, and a clear fallback to torch ops when they cannot be had.

Each kernel (``ops/_rnn_steps.c``, ``_rms_norm.c``) is plain C with no torch headers, compiled by
the system C compiler (``$CC``, which may carry arguments such as ``gcc -O2``, else cc / gcc /
clang) in well under a second and called through ctypes. The library is cached under
``$LAYERNORM_CACHE`` (default ``~/.cache/layernorm``) with a name keyed by source, compiler, flags
and CPU (``-march=native`` code must not run on another CPU), so later processes only load it.

The cache is a trusted build: the library is compiled into a temporary file and renamed into place
atomically, its SHA-256 is written beside it (``.sha256``), and before every load the file must be
a regular file owned by this user, not writable by others, with that checksum. A damaged, foreign,
misplaced or unloadable file is rebuilt once, with one warning naming the cause. A cache that is
not a writable directory (read-only, or a file) gives one warning and a build in a temporary
directory for this process. ``load`` returns None when a kernel cannot be had (not POSIX, no
compiler, a compiler that fails or runs past its timeout): its user then computes with torch ops,
and one warning says why. ``LAYERNORM_NATIVE=0`` turns every kernel off silently. Each user module
keeps its own source, ctypes signatures and the once-per-process state of its ``load``.
"""
from __future__ import annotations

import atexit
import ctypes
import hashlib
import os
import platform
import re
import shlex
import shutil
import stat
import subprocess
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .files import atomic_write_text

FLAGS = ["-O3", "-march=native", "-fno-math-errno", "-fno-trapping-math", "-shared", "-fPIC"]
# ``LAYERNORM_NATIVE_ISA=avx2``: build for this CPU without AVX-512 (the AVX2 code path of the
# kernels, as on a CPU that lacks it; tests run it), cached under its own key.
ISA_FLAGS = {"native": [], "avx2": ["-mno-avx512f"]}
# OpenMP threads over the batch rows (libgomp is torch's own, already loaded); a compiler without
# OpenMP support gets the single-threaded build.
OMP_FLAGS = (["-fopenmp"], ["-fopenmp-simd"], [])


def _compile_timeout() -> float:
    """Seconds one compiler run may take: ``LAYERNORM_COMPILE_TIMEOUT``, else 60 (a busy
    machine or an instrumented build may need more)."""
    raw = os.environ.get("LAYERNORM_COMPILE_TIMEOUT")
    if raw is None:
        return 60.0
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ValueError(f"LAYERNORM_COMPILE_TIMEOUT must be a positive number of seconds, "
                         f"received {raw!r}. Unset it for the default of 60.")
    return value


COMPILE_TIMEOUT = _compile_timeout()
FIX = ("set CC to a working C compiler (e.g. CC=gcc) and LAYERNORM_CACHE to a writable "
       "directory, or LAYERNORM_NATIVE=0 to use torch ops without this message")


class NativeKernelWarning(RuntimeWarning):
    """A C kernel was rebuilt, or is unavailable and torch ops are used instead."""


class NativeUnavailable(RuntimeError):
    """Why a C kernel could not be built or loaded (the message names the cause)."""


@dataclass(frozen=True)
class Kernel:
    """One C kernel: where its source is and what its user needs to say and check."""
    stem: str                        # the cached library is ``<stem>-<key>.so``
    source: Path
    what: str                        # names it in messages: "the RMSNorm C kernel"
    fallback: str                    # what runs instead: "Using torch ops instead (...)"
    declare: Callable[[ctypes.CDLL], None]  # sets ctypes signatures; raises if the layout differs


def enabled() -> bool:
    """False when ``LAYERNORM_NATIVE=0`` turns the kernels off."""
    return os.environ.get("LAYERNORM_NATIVE", "1") != "0"


def cache_dir() -> Path:
    root = os.environ.get("LAYERNORM_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "layernorm")
    return Path(root)


def isa() -> str:
    """The instruction set the kernels are built for: ``LAYERNORM_NATIVE_ISA`` (``native``, the
    default, or ``avx2``)."""
    name = os.environ.get("LAYERNORM_NATIVE_ISA", "native").strip().lower() or "native"
    if name not in ISA_FLAGS:
        raise NativeUnavailable(f"LAYERNORM_NATIVE_ISA={name!r} is not one of "
                                f"{', '.join(ISA_FLAGS)}; unset it or pick one of those")
    return name


def compile_flags() -> list[str]:
    """The compiler flags of a build: ``FLAGS`` and those of ``isa()``."""
    return [*FLAGS, *ISA_FLAGS[isa()]]


def cpu_signature() -> str:
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


_INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.MULTILINE)


def sources(kernel: Kernel) -> list[Path]:
    """The kernel's source and every file it ``#include "..."``s (its parts, recursively, beside
    it): all of them key the cache, so an edit to a part rebuilds."""
    seen: list[Path] = []
    todo = [kernel.source]
    while todo:
        path = todo.pop(0)
        if path in seen:
            continue
        seen.append(path)
        try:
            text = path.read_bytes()
        except OSError as e:
            raise NativeUnavailable(f"its source {path} cannot be read ({e}); reinstall the "
                                    f"package") from None
        todo += [path.parent / name.decode() for name in _INCLUDE.findall(text)]
    return seen


def cached_path(kernel: Kernel, cc: str) -> Path:
    """Where the library for this source (and its parts), compiler, flags and CPU lives in the
    cache."""
    source = b"".join(path.read_bytes() for path in sources(kernel))
    key = hashlib.sha256(source + " ".join([cc, *compile_flags(), "omp"]).encode()
                         + cpu_signature().encode()).hexdigest()[:16]
    return cache_dir() / f"{kernel.stem}-{key}.so"


def checksum_path(target: Path) -> Path:
    return target.with_name(target.name + ".sha256")


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def build(kernel: Kernel, cc: str, target: Path, extra: tuple[str, ...] = (),
          timeout: float = COMPILE_TIMEOUT) -> None:
    """Compile ``kernel`` into ``target`` atomically (``extra``: more compiler flags, e.g. for
    tests) and write its checksum beside it. Raises ``NativeUnavailable`` saying why it failed."""
    cmd, flags = shlex.split(cc), compile_flags()
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so.tmp", dir=target.parent)
    os.close(fd)
    try:
        for i, omp in enumerate(OMP_FLAGS):
            try:
                subprocess.run([*cmd, *flags, *omp, *extra, str(kernel.source), "-o", tmp, "-lm"],
                               check=True, capture_output=True, timeout=timeout)
                break
            except subprocess.CalledProcessError as e:
                if i == len(OMP_FLAGS) - 1:
                    err = e.stderr.decode(errors="replace").strip().splitlines()[-1:] or [""]
                    raise NativeUnavailable(f"the C compiler {cc!r} failed (exit {e.returncode}: "
                                            f"{err[0][:200]})") from None
            except subprocess.TimeoutExpired:
                raise NativeUnavailable(f"the C compiler {cc!r} did not finish within "
                                        f"{timeout:g} s") from None
            except FileNotFoundError as e:
                raise NativeUnavailable(f"the C compiler {cc!r} was not found ({e})") from None
            except OSError as e:
                raise NativeUnavailable(f"the C compiler {cc!r} could not be run ({e})") from None
        os.chmod(tmp, 0o755)
        digest = sha256(Path(tmp))
        os.replace(tmp, target)  # atomic: concurrent builders never see a partial file
        atomic_write_text(checksum_path(target), digest + "\n")
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def problem(target: Path) -> str | None:
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
        expected = checksum_path(target).read_text().strip()
    except OSError:
        return "has no checksum file beside it (not built by this loader)"
    if sha256(target) != expected:
        return "does not match its recorded SHA-256 (damaged or replaced)"
    return None


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


_fallback_dirs: dict[Path, Path] = {}  # unwritable cache -> this process's temporary directory


def _writable_dir(root: Path, stacklevel: int) -> Path:
    """``root`` when it is (or can be made) a writable directory, else a temporary one removed
    at exit (with a warning)."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=root, prefix=".probe-")
        probe.close()
        return root
    except OSError as e:
        if root not in _fallback_dirs:
            _fallback_dirs[root] = Path(tempfile.mkdtemp(prefix="layernorm-kernels-"))
            atexit.register(shutil.rmtree, _fallback_dirs[root], ignore_errors=True)
        tmp = _fallback_dirs[root]
        warnings.warn(f"layernorm: the kernel cache {root} is not a writable directory ({e}); "
                      f"building the C kernels in {tmp} for this process. Fix: set "
                      f"LAYERNORM_CACHE to a writable directory.", NativeKernelWarning,
                      stacklevel=stacklevel + 1)
        return tmp


def _open(kernel: Kernel, target: Path):
    lib = ctypes.CDLL(str(target))
    kernel.declare(lib)
    return lib


def _load_or_build(kernel: Kernel, cc: str, timeout: float, stacklevel: int):
    target = cached_path(kernel, cc)
    why = problem(target)
    if why is None:
        try:
            return _open(kernel, target)
        except (OSError, AttributeError, RuntimeError) as e:
            why = f"could not be loaded ({e})"
    if why != "missing":
        warnings.warn(f"layernorm: {target} ({kernel.what}, cached) {why}; rebuilding it. If "
                      f"this repeats, delete {target.parent}.", NativeKernelWarning,
                      stacklevel=stacklevel + 1)
    root = _writable_dir(target.parent, stacklevel + 1)
    target = root / target.name
    if why != "missing" and root == cache_dir():
        try:
            _remove(target)
        except OSError:
            pass
    build(kernel, cc, target, timeout=timeout)
    if problem(target) is not None:
        raise NativeUnavailable(f"the freshly built {target} failed verification "
                                f"({problem(target)})")
    try:
        return _open(kernel, target)
    except (OSError, AttributeError, RuntimeError) as e:
        raise NativeUnavailable(f"the freshly built {target} could not be loaded ({e})") from None


def load(kernel: Kernel, timeout: float = COMPILE_TIMEOUT, stacklevel: int = 2):
    """``kernel``'s library (built if needed), or None: off (``LAYERNORM_NATIVE=0``, silent) or
    unavailable (one warning saying why and what runs instead). Its caller calls this once per
    process and keeps the result."""
    if not enabled():
        return None
    reason = None
    if os.name != "posix":
        reason = f"it is built only on POSIX systems, this is {os.name!r}"
    elif not compiler():
        reason = "no C compiler was found ($CC, cc, gcc, clang)"
    else:
        try:
            return _load_or_build(kernel, compiler(), timeout, stacklevel + 1)
        except NativeUnavailable as e:
            reason = str(e)
        except OSError as e:
            reason = f"the kernel cache could not be used ({e})"
    warnings.warn(f"layernorm: cannot use {kernel.what}: {reason}. {kernel.fallback}. "
                  f"Fix: {FIX}.", NativeKernelWarning, stacklevel=stacklevel + 1)
    return None


class Library:
    """One kernel's library in this process: loaded (built first if needed) at the first
    ``get``, then kept; None when it cannot be had (one warning says why, at that first call)."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self.lib = None
        self.tried = False

    def get(self, timeout: float = COMPILE_TIMEOUT, stacklevel: int = 3):
        """The library or None (``stacklevel``: of the warning, from this method's caller)."""
        if not self.tried:
            self.tried = True
            self.lib = load(self.kernel, timeout=timeout, stacklevel=stacklevel + 1)
        return self.lib

    def build(self, cc: str, target: Path, extra: tuple[str, ...] = (),
              timeout: float = COMPILE_TIMEOUT) -> None:
        """Compile the kernel into ``target`` (``extra``: more compiler flags, e.g. for tests)."""
        build(self.kernel, cc, target, extra, timeout=timeout)

    def reset(self) -> None:
        """Forget the library: the next ``get`` loads it again (tests)."""
        self.lib, self.tried = None, False

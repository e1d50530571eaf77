"""The compiled CPU kernel of RMSNorm (``_rms_norm.c``): built on first use, cached, checked.

``functional.rms_norm`` calls ``rms_norm`` here for CPU tensors. The kernel reads each row once to
take its mean square and once more (from cache) to scale it; the backward likewise. It is plain C
with no torch headers, compiled with the system C compiler in well under a second and called
through ctypes, in float32 (float16 / bfloat16 inputs are converted to float32 and back: statistics
in float32) or float64.

The build is cached under ``$LAYERNORM_CACHE`` (default ``~/.cache/layernorm``), keyed by source,
compiler, flags and CPU. It is built into a temporary file and renamed into place atomically, with
the SHA-256 of the library written beside it; that digest is checked before every load, and a
missing, damaged or foreign library is rebuilt once. When no library can be had (no compiler, a
compiler that fails or hangs, a read-only cache) one warning per process says why and torch's
``rms_norm`` computes the same result, slower. ``LAYERNORM_NATIVE=0`` selects
that path without a warning.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
import warnings
from pathlib import Path

import torch

_SOURCE = Path(__file__).with_name("_rms_norm.c")
_FLAGS = ["-O3", "-march=native", "-fno-math-errno", "-fno-trapping-math", "-shared", "-fPIC"]
_OMP_FLAGS = (["-fopenmp"], [])  # OpenMP over rows (torch's libgomp is already loaded)
_BUILD_TIMEOUT_S = 60
# Inputs of at most this many values take torch.nn.functional.rms_norm (when dtypes agree): below it
# the ~0.1 ms of Python around a ctypes call costs more than the passes the kernel saves.
SMALL = 16384
_lib = None
_tried = False


class NativeUnavailable(RuntimeError):
    """Why the compiled kernel could not be built or loaded (the message names the fix)."""


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


def _compiler() -> list[str]:
    """$CC (which may carry flags, e.g. 'gcc -O2'), else cc / gcc / clang on the PATH."""
    cc = os.environ.get("CC")
    if cc:
        return shlex.split(cc)
    found = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not found:
        raise NativeUnavailable("no C compiler found (looked for $CC, cc, gcc, clang). Install one "
                                "(e.g. apt-get install gcc)")
    return [found]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _build(cc: list[str], target: Path) -> None:
    """Compile into a temporary file, write its digest, rename both into place (atomic)."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    except OSError as e:
        raise NativeUnavailable(f"the kernel cache {target.parent} is not writable ({e}). Point "
                                f"LAYERNORM_CACHE at a writable directory") from e
    os.close(fd)
    digest_tmp = tmp + ".sha256"
    try:
        err = ""
        for omp in _OMP_FLAGS:
            try:
                subprocess.run([*cc, *_FLAGS, *omp, str(_SOURCE), "-o", tmp, "-lm"], check=True,
                               capture_output=True, text=True, timeout=_BUILD_TIMEOUT_S)
                break
            except subprocess.CalledProcessError as e:
                err = (e.stderr or "").strip().splitlines()[-1:] or [f"exit status {e.returncode}"]
                err = err[0]
        else:
            raise NativeUnavailable(f"compiling {_SOURCE.name} with {' '.join(cc)!r} failed: "
                                    f"{err}. Check the compiler ($CC)")
        with open(digest_tmp, "w") as f:
            f.write(_sha256(Path(tmp)))
        os.replace(tmp, target)
        os.replace(digest_tmp, _digest_path(target))
    except subprocess.TimeoutExpired as e:
        raise NativeUnavailable(f"the C compiler {' '.join(cc)!r} did not finish within "
                                f"{_BUILD_TIMEOUT_S} s. Check the compiler ($CC)") from e
    except FileNotFoundError as e:
        raise NativeUnavailable(f"the C compiler {' '.join(cc)!r} was not found ({e}). Set $CC to "
                                f"an installed compiler") from e
    except OSError as e:
        raise NativeUnavailable(f"writing the kernel into {target.parent} failed ({e}). Point "
                                f"LAYERNORM_CACHE at a writable directory") from e
    finally:
        for leftover in (tmp, digest_tmp):
            if os.path.exists(leftover):
                os.unlink(leftover)


def _digest_path(target: Path) -> Path:
    return target.with_name(target.name + ".sha256")


def _verified(target: Path) -> bool:
    """The library is a regular file whose SHA-256 is the one recorded when it was built."""
    try:
        return target.is_file() and _digest_path(target).read_text().strip() == _sha256(target)
    except OSError:
        return False


def _declare(lib) -> None:
    L, D, i, p = ctypes.c_long, ctypes.c_double, ctypes.c_int, ctypes.c_void_p
    for suffix in ("f32", "f64"):
        fwd, bwd = getattr(lib, f"rms_forward_{suffix}"), getattr(lib, f"rms_backward_{suffix}")
        fwd.argtypes, fwd.restype = [L, L, D, i, p, p, p, p], None
        bwd.argtypes, bwd.restype = [L, L, i, p, p, p, p, p, p], i


def _rebuilt(target: Path, why: str) -> None:
    warnings.warn(f"RMSNorm: the cached kernel {target} {why}; rebuilt it. If this happens again, "
                  f"check what else writes to LAYERNORM_CACHE ({target.parent}).", RuntimeWarning,
                  stacklevel=4)


def _target() -> tuple[list[str], Path]:
    """The compiler and the cached library's path for this source, compiler, flags and CPU."""
    cc = _compiler()
    try:
        source = _SOURCE.read_bytes()
    except OSError as e:
        raise NativeUnavailable(f"its source {_SOURCE} cannot be read ({e}). Reinstall the "
                                f"package") from e
    key = hashlib.sha256(source + " ".join([*cc, *_FLAGS, "omp"]).encode()
                         + _cpu_signature().encode()).hexdigest()[:16]
    return cc, _cache_dir() / f"rms_norm-{key}.so"


def _load_once():
    cc, target = _target()
    if not _verified(target):  # missing: build it; damaged or foreign: rebuild it and say so
        existed = os.path.lexists(target)
        _build(cc, target)
        if existed:
            _rebuilt(target, "did not match the SHA-256 recorded when it was built (damaged or "
                             "replaced)")
    for attempt in range(2):
        if attempt:
            _build(cc, target)
            _rebuilt(target, f"could not be loaded ({loading_error})")
        if not _verified(target):
            raise NativeUnavailable(f"the built kernel {target} changed before it could be "
                                    f"loaded. Point LAYERNORM_CACHE at a private directory")
        try:
            lib = ctypes.CDLL(str(target))
            _declare(lib)
            return lib
        except (OSError, AttributeError) as e:
            loading_error = e
            if attempt:
                raise NativeUnavailable(f"loading {target} failed ({e}). Remove the file and "
                                        f"check the compiler ($CC)") from e
    return None  # not reached


def load():
    """The loaded library, or None (then use the torch-ops path; one warning says why)."""
    global _lib, _tried
    if _tried:
        return _lib
    _tried = True
    if os.environ.get("LAYERNORM_NATIVE", "1") == "0":
        return None
    try:
        if os.name != "posix":
            raise NativeUnavailable(f"it is built for POSIX systems only, this is {os.name!r}")
        _lib = _load_once()
    except NativeUnavailable as e:
        warnings.warn(f"RMSNorm: the compiled CPU kernel is not available: {e}. Using torch ops "
                      f"instead (same results, slower); set LAYERNORM_NATIVE=0 to choose that "
                      f"without this warning.", RuntimeWarning, stacklevel=3)
        _lib = None
    return _lib


def _reset_for_tests() -> None:
    global _lib, _tried
    _lib, _tried = None, False


def eligible(x: torch.Tensor, weight: torch.Tensor | None) -> bool:
    """The kernel handles CPU tensors in eager (reverse-mode) autograd; scripting, tracing,
    torch.compile, torch.func transforms and forward-mode AD (which need torch ops they can see)
    take the torch-ops path."""
    if x.device.type != "cpu" or (weight is not None and weight.device.type != "cpu"):
        return False
    if torch.jit.is_scripting() or torch.jit.is_tracing() or torch.compiler.is_compiling():
        return False
    wrapped = torch._C._functorch.is_functorch_wrapped_tensor
    if wrapped(x) or (weight is not None and wrapped(weight)):
        return False
    if getattr(torch.autograd.forward_ad, "_current_level", -1) >= 0:  # forward-mode AD: torch ops
        return False
    return os.environ.get("LAYERNORM_NATIVE", "1") != "0"


def _ptr(t: torch.Tensor | None):
    return None if t is None else t.data_ptr()


def _kernels(dtype: torch.dtype):
    lib = load()
    suffix = "f64" if dtype == torch.float64 else "f32"
    return getattr(lib, f"rms_forward_{suffix}"), getattr(lib, f"rms_backward_{suffix}")


class _RMSNorm(torch.autograd.Function):
    """y = w * x * rstd over the rows of x (N, H), rstd = 1 / sqrt(mean(x^2) + eps); x and w
    contiguous, float32 or float64. The backward is differentiable (create_graph=True) through torch
    ops, so second derivatives are exact."""

    # forward(ctx, ...) rather than setup_context: apply() then skips binding the signature (tens of
    # microseconds a call); torch.func transforms take the torch-ops path anyway (``eligible``).
    @staticmethod
    def forward(ctx, x, weight, eps):
        n, h = x.shape
        y, rstd = torch.empty_like(x), torch.empty(n, dtype=x.dtype)
        forward, _ = _kernels(x.dtype)
        forward(n, h, eps, torch.get_num_threads(), _ptr(x), _ptr(weight), _ptr(y), _ptr(rstd))
        ctx.eps = eps
        ctx.mark_non_differentiable(rstd)
        ctx.save_for_backward(x, weight, rstd)
        return y, rstd

    @staticmethod
    def backward(ctx, gy, _grstd):
        x, weight, rstd = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph: a backward autograd can differentiate again
            return (*_backward_torch(gy, x, weight, ctx.eps), None)
        gy = gy.contiguous()
        n, h = x.shape
        dx = torch.empty_like(x)
        dw = torch.empty_like(weight) if weight is not None and ctx.needs_input_grad[1] else None
        _, backward = _kernels(x.dtype)
        if backward(n, h, torch.get_num_threads(), _ptr(gy), _ptr(x), _ptr(weight), _ptr(rstd),
                    _ptr(dx), _ptr(dw)):
            raise MemoryError(f"RMSNorm backward could not allocate its {h}-value gain-gradient "
                              f"buffers. Free memory or use a smaller batch.")
        return dx, dw, None


def _backward_torch(gy, x, weight, eps):
    """The same gradients in torch ops: dx = r (gw - xhat mean(gw xhat)), dw = sum_rows g xhat."""
    rstd = torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)
    xhat = x * rstd
    gw = gy * weight if weight is not None else gy
    dx = rstd * (gw - xhat * (gw * xhat).mean(-1, keepdim=True))
    dw = (gy * xhat).sum(0) if weight is not None else None
    return dx, dw


def rms_norm(x: torch.Tensor, h: int, weight: torch.Tensor | None, eps: float):
    """RMSNorm of x (..., H) over its last ``h`` values with the compiled kernel, in x's dtype
    (statistics in float32 for half types), or None when the kernel is not available."""
    if load() is None:
        return None
    cdtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    x2 = x.reshape(-1, h).to(cdtype).contiguous()
    w = None if weight is None else weight.reshape(h).to(cdtype).contiguous()
    y, _ = _RMSNorm.apply(x2, w, float(eps))
    return y.view(x.shape).to(x.dtype)

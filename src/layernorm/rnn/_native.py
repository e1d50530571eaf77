"""The optional C kernels of the LN-LSTM / LN-GRU (``_rnn_steps.c``: each cell's whole forward
and backward time loops): built on first use, cached, verified before every load.

The build, the trusted cache and the fallback are ``layernorm._native_build``'s (one warning per
process when the kernels cannot be had; ``LAYERNORM_NATIVE=0`` turns them off silently); this
module names the source and declares the kernels' ctypes signatures, checking the C structs
against their mirrors in ``_structs``.
"""
from __future__ import annotations

import ctypes
from pathlib import Path

from .. import _native_build
from ._structs import check_layout
from .._native_build import (COMPILE_TIMEOUT, NativeKernelWarning, compiler,  # noqa: F401
                             problem as _problem)


def _declare(lib) -> None:
    i, p, size = ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t
    lib.panel_width.argtypes = []
    lib.panel_width.restype = i
    lib.gemm_packed.argtypes = [i, i, p, p, i, p]
    lib.gemm_packed.restype = None
    for cell in ("lstm", "gru"):
        for kernel in ("forward_seq", "backward_seq"):
            f = getattr(lib, f"{cell}_{kernel}")
            f.argtypes = [p]  # a pointer to the cell's struct (_structs.LSTMArgs / GRUArgs)
            f.restype = i
        # the cells' one step, W_hh h given as the second argument (GRU backward: the direct
        # gradient of h_0 as the second)
        step_backward = [p, p] if cell == "gru" else [p]
        for kernel, args in (("step_forward", [p, p]), ("step_backward", step_backward)):
            f = getattr(lib, f"{cell}_{kernel}")
            f.argtypes = args
            f.restype = i
        for what in ("struct_size", "struct_last"):
            f = getattr(lib, f"{cell}_{what}")
            f.argtypes = []
            f.restype = size
    for cell in ("bn_lstm", "bn_gru"):
        for kernel in ("forward_seq", "backward_seq", "struct_size", "struct_last"):
            f = getattr(lib, f"{cell}_{kernel}")
            f.argtypes = [] if kernel.startswith("struct") else [p]
            f.restype = size if kernel.startswith("struct") else i
    check_layout(lib)


KERNEL = _native_build.Kernel(
    stem="rnn_steps", source=Path(__file__).with_name("_rnn_steps.c"),
    what="the LN-LSTM/GRU C kernels", fallback="Using the torch-ops path (2-3x slower)",
    declare=_declare)


_LIBRARY = _native_build.Library(KERNEL)


def _build(cc: str, target: Path, extra: tuple[str, ...] = ()) -> None:
    """Compile the kernels into ``target`` (``extra``: more compiler flags, e.g. for tests)."""
    _LIBRARY.build(cc, target, extra, timeout=COMPILE_TIMEOUT)


def load():
    """The loaded library, or None (then use the torch-ops path; one warning says why)."""
    return _LIBRARY.get(timeout=COMPILE_TIMEOUT)

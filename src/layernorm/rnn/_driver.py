"""Calling the C kernels of ``_rnn_steps.c``: one ``ctypes.Structure`` per cell that mirrors the
kernel's C struct field by field (names and shapes as there), checked against the library once
when it is loaded, so a field added on one side only is an error, never a misread pointer."""
from __future__ import annotations

import ctypes

import torch

_int, _float, _ptr = ctypes.c_int, ctypes.c_float, ctypes.c_void_p

# Set to False to force the torch-ops path (tests run both): ``layernorm.rnn.fused.USE_NATIVE``.
USE_NATIVE = True


class LSTMArgs(ctypes.Structure):
    """``struct lstm``: G = 4H; float32, contiguous; pointers may be NULL where the C says so."""
    _fields_ = [
        ("T", _int), ("B", _int), ("H", _int), ("nthreads", _int), ("eps", _float),
        ("batch_sizes", _ptr),                 # (T,) int32, decreasing, or NULL
        ("xw", _ptr),                          # (T, B, G)
        ("gain_x", _ptr), ("bias_x", _ptr),    # (G,) or NULL
        ("wp", _ptr),                          # W_hh (G, H) in panels (forward)
        ("wtp", _ptr),                         # W_hh^T (H, G) in panels (backward)
        ("gain_h", _ptr), ("bias_h", _ptr),    # (G,)
        ("gain_c", _ptr), ("bias_c", _ptr),    # (H,)
        ("grad_out", _ptr),                    # (T, B, H) backward
        ("hs", _ptr),                          # (T + 1, B, H)
        ("h_n", _ptr), ("c_n", _ptr),          # (B, H)
        ("cs", _ptr),                          # (T + 1, B, H) saved, NULL: save nothing
        ("hg_all", _ptr), ("act_all", _ptr),   # (T, B, G) saved
        ("tc_all", _ptr),                      # (T, B, H) saved
        ("stats", _ptr),                       # (6, T, B) saved
        ("dh", _ptr), ("dc", _ptr),            # (B, H) backward
        ("dxg", _ptr), ("dhg", _ptr),          # (T, B, G) backward
        ("dparams", _ptr),                     # (18 H,) float64 backward
    ]


class GRUArgs(ctypes.Structure):
    """``struct gru``: G = 3H; float32, contiguous."""
    _fields_ = [
        ("T", _int), ("B", _int), ("H", _int), ("nthreads", _int), ("eps", _float),
        ("batch_sizes", _ptr),                 # (T,) int32 or NULL
        ("xw", _ptr),                          # (T, B, 3H)
        ("gain_x", _ptr), ("bias_x", _ptr),    # (3H,) or NULL
        ("wp", _ptr), ("wtp", _ptr),           # W_hh (3H, H), W_hh^T (H, 3H) in panels
        ("gain_h", _ptr), ("bias_h", _ptr),    # (2H,)
        ("gain_u", _ptr), ("bias_u", _ptr),    # (H,)
        ("grad_out", _ptr),                    # (T, B, H) backward
        ("hs", _ptr),                          # (T + 1, B, H)
        ("h_n", _ptr),                         # (B, H)
        ("hg_all", _ptr),                      # (T, B, 3H) saved, NULL: save nothing
        ("rz_all", _ptr),                      # (T, B, 2H) saved
        ("un_all", _ptr), ("n_all", _ptr),     # (T, B, H) saved
        ("stats", _ptr),                       # (8, T, B) saved
        ("dh", _ptr),                          # (B, H) backward
        ("dxg", _ptr), ("dhg", _ptr),          # (T, B, 3H) backward
        ("dparams", _ptr),                     # (12 H,) float64 backward
    ]


_STRUCTS = {"lstm": LSTMArgs, "gru": GRUArgs}


def check_layout(lib) -> None:
    """The ctypes mirrors against the compiled structs (size and the last field's offset)."""
    for name, cls in _STRUCTS.items():
        size = getattr(lib, f"{name}_struct_size")()
        last = getattr(lib, f"{name}_struct_last")()
        if size != ctypes.sizeof(cls) or last != cls.dparams.offset:
            raise RuntimeError(f"the C struct {name} ({size} bytes, dparams at {last}) does not "
                               f"match {cls.__name__} ({ctypes.sizeof(cls)} bytes, dparams at "
                               f"{cls.dparams.offset}): update both sides together.")


def native_lib(x: torch.Tensor):
    """The C kernels when they apply (float32 CPU tensors) and load here, else None."""
    from . import fused
    if not (USE_NATIVE and fused.USE_NATIVE) or x.device.type != "cpu" or x.dtype != torch.float32:
        return None
    from . import _native
    return _native.load()


def threads(B: int) -> int:
    """Threads for the whole-sequence C kernel: torch's count, at least 4 examples each."""
    return max(1, min(torch.get_num_threads(), B // 4))


def call(lib, kernel: str, cls, who: str, **fields) -> None:
    """Fill a ``cls`` (tensors by address: float32 / int32 / float64 as the fields say, and
    contiguous; None: NULL) and run ``kernel`` on it. The caller keeps the tensors alive."""
    args = cls()
    for name, value in fields.items():
        if isinstance(value, torch.Tensor):
            if not value.is_contiguous() or value.device.type != "cpu":
                raise RuntimeError(f"internal: {who}: {name} must be a contiguous CPU tensor")
            value = value.data_ptr()
        setattr(args, name, value)
    status = getattr(lib, kernel)(ctypes.byref(args))
    if status != 0:
        raise MemoryError(f"{who}: the C kernel could not allocate its per-thread workspace "
                          f"(status {status}). Use a smaller batch or fewer threads.")


def int32(batch_sizes: torch.Tensor | None) -> torch.Tensor | None:
    return None if batch_sizes is None else batch_sizes.to(torch.int32).contiguous()

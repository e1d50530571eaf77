"""The C interface of ``_rnn_steps.c``: one ``ctypes.Structure`` per cell that mirrors the
kernel's C struct field by field (names and shapes as there), and the check against the compiled
library, run once when it is loaded, so a field added on one side only is an error, never a
misread pointer."""
from __future__ import annotations

import ctypes

_int, _float, _ptr = ctypes.c_int, ctypes.c_float, ctypes.c_void_p


class LSTMArgs(ctypes.Structure):
    """``struct lstm``: G = 4H; float32, contiguous; pointers may be NULL where the C says so."""
    _fields_ = [
        ("T", _int), ("B", _int), ("H", _int), ("nthreads", _int),
        ("t0", _int), ("t1", _int),            # backward: steps t0 <= t < t1 (both 0: all)
        ("eps", _float),
        ("batch_sizes", _ptr),                 # (T,) int32, decreasing, or NULL
        ("xw", _ptr),                          # (T, B, G)
        ("gain_x", _ptr), ("bias_x", _ptr),    # (G,) or NULL
        ("wp", _ptr),                          # W_hh (G, H) in panels (forward)
        ("wtp", _ptr),                         # W_hh^T (H, G) in panels (backward)
        ("gain_h", _ptr), ("bias_h", _ptr),    # (G,)
        ("gain_c", _ptr), ("bias_c", _ptr),    # (H,)
        ("grad_out", _ptr),                    # (T, B, H) backward
        ("h0", _ptr),                          # (B, H)
        ("out", _ptr),                         # (T, B, H) h_1 .. h_T
        ("h_n", _ptr), ("c_n", _ptr),          # (B, H)
        ("cs", _ptr),                          # (T + 1, B, H) saved, NULL: save nothing
        ("hg_all", _ptr), ("act_all", _ptr),   # (T, B, G) saved
        ("tc_all", _ptr),                      # (T, B, H) saved
        ("stats", _ptr),                       # (6, T, B) saved
        ("dh", _ptr), ("dc", _ptr),            # (B, H) backward
        ("dxg", _ptr),                         # (T, B, G) backward
        ("dhg", _ptr),                         # (t1 - t0, B, G) backward
        ("dparams", _ptr),                     # (18 H,) float64 backward
    ]


class GRUArgs(ctypes.Structure):
    """``struct gru``: G = 3H; float32, contiguous."""
    _fields_ = [
        ("T", _int), ("B", _int), ("H", _int), ("nthreads", _int),
        ("t0", _int), ("t1", _int),            # backward: steps t0 <= t < t1 (both 0: all)
        ("eps", _float),
        ("batch_sizes", _ptr),                 # (T,) int32 or NULL
        ("xw", _ptr),                          # (T, B, 3H)
        ("gain_x", _ptr), ("bias_x", _ptr),    # (3H,) or NULL
        ("wp", _ptr), ("wtp", _ptr),           # W_hh (3H, H), W_hh^T (H, 3H) in panels
        ("gain_h", _ptr), ("bias_h", _ptr),    # (2H,)
        ("gain_u", _ptr), ("bias_u", _ptr),    # (H,)
        ("grad_out", _ptr),                    # (T, B, H) backward
        ("h0", _ptr),                          # (B, H)
        ("out", _ptr),                         # (T, B, H) h_1 .. h_T
        ("h_n", _ptr),                         # (B, H)
        ("hg_all", _ptr),                      # (T, B, 3H) saved, NULL: save nothing
        ("stats", _ptr),                       # (8, T, B) saved
        ("dh", _ptr),                          # (B, H) backward
        ("dxg", _ptr),                         # (T, B, 3H) backward
        ("dhg", _ptr),                         # (t1 - t0, B, 3H) backward
        ("dparams", _ptr),                     # (12 H,) float64 backward
    ]


class BNLSTMArgs(ctypes.Structure):
    """``struct bn_lstm``: G = 4H; float32, contiguous (the BN-LSTM of docs/rnnfast.md)."""
    _fields_ = [
        ("T", _int), ("B", _int), ("H", _int), ("nthreads", _int),
        ("t0", _int), ("t1", _int),            # backward: steps t0 <= t < t1 (both 0: all)
        ("eps", _float),
        ("batch_sizes", _ptr),                 # (T,) int32, decreasing, or NULL
        ("batch_stats", _ptr),                 # (T,) int32: 1 batch statistics, 0 given ones
        ("xw", _ptr),                          # (T, B, G) W_x x
        ("gain_x", _ptr), ("bias_x", _ptr),    # (G,) the input term's batch norm
        ("wp", _ptr), ("wtp", _ptr),           # W_hh, W_hh^T in panels
        ("gain_h", _ptr), ("bias_h", _ptr),    # (G,)
        ("gain_c", _ptr), ("bias_c", _ptr),    # (H,)
        ("grad_out", _ptr),                    # (T, B, H) backward
        ("h0", _ptr),                          # (B, H)
        ("out", _ptr),                         # (T, B, H) h_1 .. h_T
        ("h_n", _ptr), ("c_n", _ptr),          # (B, H)
        ("cs", _ptr),                          # (T + 1, B, H) saved, NULL: save nothing
        ("hg_all", _ptr), ("act_all", _ptr),   # (T, B, G) saved
        ("tc_all", _ptr),                      # (T, B, H) saved
        ("mean_h", _ptr), ("var_h", _ptr),     # (T, G) step statistics
        ("mean_c", _ptr), ("var_c", _ptr),     # (T, H)
        ("mean_x", _ptr), ("var_x", _ptr),     # (T, G)
        ("dh", _ptr), ("dc", _ptr),            # (B, H) backward
        ("dxg", _ptr),                         # (T, B, G) backward
        ("dhg", _ptr),                         # (t1 - t0, B, G) backward
        ("dparams", _ptr),                     # (4 G + 2 H,) float64 backward
    ]


class BNGRUArgs(ctypes.Structure):
    """``struct bn_gru``: G = 3H; float32, contiguous (the BN-GRU of docs/rnnfast.md)."""
    _fields_ = [
        ("T", _int), ("B", _int), ("H", _int), ("nthreads", _int),
        ("t0", _int), ("t1", _int),            # backward: steps t0 <= t < t1 (both 0: all)
        ("eps", _float),
        ("batch_sizes", _ptr),                 # (T,) int32, decreasing, or NULL
        ("batch_stats", _ptr),                 # (T,) int32: 1 batch statistics, 0 given ones
        ("xw", _ptr),                          # (T, B, G) W_x x
        ("gain_x", _ptr), ("bias_x", _ptr),    # (G,)
        ("wp", _ptr), ("wtp", _ptr),           # W_hh, W_hh^T in panels
        ("gain_h", _ptr), ("bias_h", _ptr),    # (G,)
        ("grad_out", _ptr),                    # (T, B, H) backward
        ("h0", _ptr),                          # (B, H)
        ("out", _ptr),                         # (T, B, H) h_1 .. h_T
        ("h_n", _ptr),                         # (B, H)
        ("hg_all", _ptr), ("act_all", _ptr),   # (T, B, G) saved, NULL: save nothing
        ("mean_h", _ptr), ("var_h", _ptr),     # (T, G) step statistics
        ("mean_x", _ptr), ("var_x", _ptr),     # (T, G)
        ("dh", _ptr),                          # (B, H) backward
        ("dxg", _ptr),                         # (T, B, G) backward
        ("dhg", _ptr),                         # (t1 - t0, B, G) backward
        ("dparams", _ptr),                     # (4 G,) float64 backward
    ]


STRUCTS = {"lstm": LSTMArgs, "gru": GRUArgs, "bn_lstm": BNLSTMArgs, "bn_gru": BNGRUArgs}


def check_layout(lib) -> None:
    """The ctypes mirrors against the compiled structs (size and the last field's offset)."""
    for name, cls in STRUCTS.items():
        size = getattr(lib, f"{name}_struct_size")()
        last = getattr(lib, f"{name}_struct_last")()
        if size != ctypes.sizeof(cls) or last != cls.dparams.offset:
            raise RuntimeError(f"the C struct {name} ({size} bytes, dparams at {last}) does not "
                               f"match {cls.__name__} ({ctypes.sizeof(cls)} bytes, dparams at "
                               f"{cls.dparams.offset}): update both sides together.")

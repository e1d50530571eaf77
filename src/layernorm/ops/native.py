"""The C kernels of ``_rnn_steps.c`` (the LN-LSTM / LN-GRU and BN-LSTM / BN-GRU time loops and
the cells' one step): loading them, their C structs, one call by name, and where a call runs.

Loading: built on first use, cached, verified before every load. The build, the trusted cache
and the fallback are ``layernorm._native_build``'s (one warning per process when the kernels
cannot be had; ``LAYERNORM_NATIVE=0`` turns them off silently); this module names the source and
declares the kernels' ctypes signatures, checking the C structs against their mirrors here.

The C structs: one ``ctypes.Structure`` per cell that mirrors the kernel's C struct field by
field (names and shapes as there), and the check against the compiled library, run once when it
is loaded, so a field added on one side only is an error, never a misread pointer.

Calling: the thread count, and one call with its arguments by name (``call``).

Where a call runs (``where``): the library's runtime questions, asked there and nowhere else,
and each operator's path chosen from the answers (``Where``'s methods), written there and nowhere
else. Which implementation computes a call depends on facts of the moment, not on the module that
makes it: whether the C kernels (``_rnn_steps.c``) are loaded and allowed (``USE_NATIVE``),
whether torch runs eagerly on plain tensors (not compiling, exporting or tracing; no dispatch or
function mode, no tensor subclass), whether a torch.func transform or forward-mode AD is active,
whether autocast is on, whether ``torch.onnx.export`` is capturing the model, and whether the
Triton kernels take the tensors (CUDA). An operator's entry asks ``where(x, *tensors)`` once
(``inference(...)`` for the inference kernels) and calls the path its method names
(``sequence``, ``inference``, ``cell``, ``linear``; ``c`` for the BN and plain operators).
Nothing above the operators asks: the modules and the cells call an operator and take what it
returns. An operator whose reference is the module's readable loop (BN, plain, one step under
autocast) returns None where its kernels do not run, and the module runs that loop.
"""
from __future__ import annotations

import ctypes
from pathlib import Path
from typing import NamedTuple

import torch

from .. import _native_build, kernels
from .._native_build import (COMPILE_TIMEOUT, NativeKernelWarning, compiler,  # noqa: F401
                             problem as _problem)
from ..checks import autocast_on

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
        ("h_mask", _ptr),                      # (B, H) recurrent dropout, or NULL
        ("zone_h", _ptr), ("zone_c", _ptr),    # (T, B, H) zoneout, or NULL
        ("I", _int), ("path", _int),           # with x: I; the threads' split (common.SPLIT)
        ("x", _ptr),                           # (T, B, I) inference: W_x x inside, or NULL
        ("wxp", _ptr),                         # W_x (G, I) in panels, with x
        ("wpb", _ptr), ("wxpb", _ptr),         # W_hh, W_x in bfloat16 panels, or NULL
        ("wtpb", _ptr),                        # W_hh^T in bfloat16 panels (backward), or NULL
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
        ("h_mask", _ptr),                      # (B, H) recurrent dropout, or NULL
        ("zone_h", _ptr),                      # (T, B, H) zoneout, or NULL
        ("I", _int), ("path", _int),           # with x: I; the threads' split (common.SPLIT)
        ("x", _ptr),                           # (T, B, I) inference: W_x x inside, or NULL
        ("wxp", _ptr),                         # W_x (3H, I) in panels, with x
        ("wpb", _ptr), ("wxpb", _ptr),         # W_hh, W_x in bfloat16 panels, or NULL
        ("wtpb", _ptr),                        # W_hh^T in bfloat16 panels (backward), or NULL
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
        ("h_mask", _ptr),                      # (B, H) recurrent dropout, or NULL
        ("zone_h", _ptr), ("zone_c", _ptr),    # (T, B, H) zoneout, or NULL
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
        ("h_mask", _ptr),                      # (B, H) recurrent dropout, or NULL
        ("zone_h", _ptr),                      # (T, B, H) zoneout, or NULL
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


def _declare(lib) -> None:
    i, p, size = ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t
    lib.panel_width.argtypes, lib.panel_width.restype = [], i
    lib.pack_panels.argtypes, lib.pack_panels.restype = [i, i, p, i, p, i, i], i
    lib.gemm_packed.argtypes = [i, i, p, p, i, p, i]
    lib.gemm_packed.restype = None
    lib.gemm_packed_at.argtypes = [i, i, p, p, ctypes.c_long, i, p, p, i, i, i]
    lib.gemm_packed_at.restype = i
    lib.matvec_rows.argtypes = [i, i, p, p, i, p]
    lib.matvec_rows.restype = None
    lib.bf16_dot.argtypes = []
    lib.bf16_dot.restype = i
    lib.gemm_packed_bf16.argtypes = [i, i, p, p, i, p]
    lib.gemm_packed_bf16.restype = i
    for cell in ("lstm", "gru"):
        for kernel in ("forward_seq", "backward_seq"):
            f = getattr(lib, f"{cell}_{kernel}")
            f.argtypes = [p]  # a pointer to the cell's struct (LSTMArgs / GRUArgs)
            f.restype = i
        # the cells' one step, W_hh h given as the second argument (backward: the direct
        # gradient of h_0 as the second, NULL for an LSTM without zoneout)
        for kernel, args in (("step_forward", [p, p]), ("step_backward", [p, p])):
            f = getattr(lib, f"{cell}_{kernel}")
            f.argtypes = args
            f.restype = i
        # the cells' whole step at batch 1 (struct, xw, hg, x, W_x, h * mask, W_hh; LSTM: c_0)
        f = getattr(lib, f"{cell}_cell_forward")
        f.argtypes = [p] * (8 if cell == "lstm" else 7)
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
    if _LIBRARY.tried:                       # (asked at every call: no call down once tried)
        return _LIBRARY.lib
    return _LIBRARY.get(timeout=COMPILE_TIMEOUT)


NO_KERNELS = ("the C kernels are not available in this process (the operator was traced or "
              "exported where they were); run the module eagerly, where it falls back to the "
              "reference loop, or build the kernels here (docs/rnnfast.md)")


def loaded(who: str):
    """The C kernels for an operator's body (forward or backward), run because its entry chose
    them (``where``), or a clear error where this process has none (a graph traced or exported
    where they were)."""
    lib = load()
    if lib is None:
        raise RuntimeError(f"layernorm::{who}: {NO_KERNELS}.")
    return lib


__all__ = ["threads", "call", "int32", "LSTMArgs", "GRUArgs", "BNLSTMArgs",
           "BNGRUArgs", "USE_NATIVE", "Where", "where"]

# Set to False to force the torch-ops path (tests run both); ``layernorm.rnn.fused.USE_NATIVE``
# reads and sets this switch.
USE_NATIVE = True


def threads(B: int) -> int:
    """Threads for the BN sequence kernels and the cells: torch's count, 4 examples each."""
    return max(1, min(torch.get_num_threads(), B // 4))


_NAMES: dict = {}  # a struct class -> its field names (``call``)


def call(lib, kernel: str, cls, who: str, **fields) -> None:
    """Fill a ``cls`` (tensors by address: float32 / int32 / float64 as the fields say, and
    contiguous; None: NULL) and run ``kernel`` on it. The caller keeps the tensors alive.

    Built in one ``cls(**fields)`` (ctypes sets the fields in C) after the tensors are replaced
    by their addresses: a small sequence's call spends as long here as in its kernel otherwise
    (measured ~26 us of Python a call, setting ~25 fields one by one, against ~15 so)."""
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = frozenset(name for name, _ in cls._fields_)
    if not names.issuperset(fields):
        unknown = sorted(set(fields) - names)[0]
        raise TypeError(f"internal: {who}: {cls.__name__} has no field {unknown!r}")
    for name, value in fields.items():
        if isinstance(value, torch.Tensor):
            if not (value.is_cpu and value.is_contiguous()):
                raise RuntimeError(f"internal: {who}: {name} must be a contiguous CPU tensor")
            fields[name] = value.data_ptr()
    args = cls(**fields)
    status = getattr(lib, kernel)(ctypes.byref(args))
    if status == -2:
        raise RuntimeError(f"internal: {who}: step range t0={args.t0}, t1={args.t1} outside "
                           f"[0, T={args.T}]")
    if status == -3:
        raise RuntimeError(f"internal: {who}: the input GEMM inside the kernel (x) runs only "
                           f"without saving for a backward and with the input's layer norm "
                           f"(gain_x) and packed W_x (wxp)")
    if status == -4:
        raise RuntimeError(f"internal: {who}: bfloat16 panels (wpb, wxpb, wtpb) were passed to a "
                           f"build without bfloat16 dot products (bf16_dot() is 0)")
    if status != 0:
        raise MemoryError(f"{who}: the C kernel could not allocate its per-thread workspace "
                          f"(status {status}). Use a smaller batch or fewer threads.")


def int32(batch_sizes: torch.Tensor | None) -> torch.Tensor | None:
    return None if batch_sizes is None else batch_sizes.to(torch.int32).contiguous()


def contig(v):
    """``v`` detached and contiguous (None stays None): an argument for the C kernels."""
    return None if v is None else v.detach().contiguous()


# ---- where a call runs
_HALF_GEMM: dict[torch.dtype, bool] = {}  # whether oneDNN has a native GEMM for a half type here


def half_gemm_native(dtype: torch.dtype) -> bool:
    """This CPU runs ``dtype`` (bfloat16 / float16) GEMMs natively (AVX512-BF16 / AMX /
    AVX512-FP16, as oneDNN reports). Without, torch emulates them, ~9x slower than float32
    (measured: (3200, 128) x (128, 1024) in bfloat16 on an AVX2 CPU)."""
    if dtype not in _HALF_GEMM:
        check = {torch.bfloat16: "_is_mkldnn_bf16_supported",
                 torch.float16: "_is_mkldnn_fp16_supported"}[dtype]
        try:
            _HALF_GEMM[dtype] = bool(getattr(torch.ops.mkldnn, check)())
        except (AttributeError, RuntimeError):
            _HALF_GEMM[dtype] = False
    return _HALF_GEMM[dtype]


_PLAIN = (torch.Tensor, torch.nn.Parameter)


class Where(NamedTuple):
    """The answers for one call (see the module docstring).

    ``lib``: the loaded C kernels where ``USE_NATIVE`` holds and x is on the CPU (any dtype:
    the operator checks its own), else None. ``eager``: eager mode on plain tensors (a C kernel
    may run in place of torch ops, an operator's body may run without the dispatcher).
    ``transformed``: a torch.func transform or forward-mode AD is active (eager).
    ``autocast``: autocast's dtype on x's device, None where it is off. ``onnx``:
    ``torch.onnx.export`` is capturing (the operators have no ONNX translation, so the reference
    runs). ``triton``: the Triton recurrence kernels take x (CUDA; ``kernels.applies_rnn``;
    asked for the LN sequence operators only, ``where(..., rnn=True)``)."""
    lib: object | None
    eager: bool
    transformed: bool
    autocast: torch.dtype | None
    onnx: bool
    triton: bool

    def c(self, *tensors: torch.Tensor, dtypes=(torch.float32,)):
        """The C kernels for an eager call on these tensors (on the CPU, of ``dtypes``) with no
        transform, autocast or ONNX capture, else None."""
        if self.lib is None or not self.eager or self.transformed or self.autocast is not None \
                or self.onnx:
            return None
        for t in tensors:
            if t.dtype not in dtypes or not t.is_cpu:
                return None
        return self.lib

    # ---- each operator's path from these answers: the choices, written here only

    def sequence(self, compute: torch.dtype) -> str:
        """An LN sequence operator's path (``sequence.run_sequence``; ``compute``: its compute
        dtype): "triton" where the Triton kernels take the call, not under a torch.func transform
        or forward-mode AD (their autograd.Function carries no tangent and has no functorch
        rule); where the C kernels are loaded and ``compute`` is float32, with no transform and
        no ONNX capture, "body" (the registered operator's body called directly, with the same
        autograd: eager mode on plain tensors) or "op" (the registered operator); elsewhere
        "reference" (the reference loop under ordinary autograd)."""
        if self.triton and not self.transformed:
            return "triton"
        if self.lib is None or compute != torch.float32 or self.transformed or self.onnx:
            return "reference"
        return "body" if self.eager else "op"

    def dtype(self, x: torch.Tensor) -> torch.dtype:
        """The dtype of an autocast-eligible op's result on x: autocast's where it is on, else
        x's."""
        return x.dtype if self.autocast is None else self.autocast

    def to(self, t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """``t.to(dtype)``; in eager mode on plain tensors ``t`` itself where it has the dtype
        already (what ``.to`` returns, without the ~2 us of the call)."""
        return t if self.eager and t.dtype == dtype else t.to(dtype)

    def inference(self, tensors: tuple) -> torch.dtype | None:
        """Whether the inference kernels run a layer's forward on ``tensors`` (its raw input,
        states and parameters), nothing being saved for a backward (``inference`` below checks
        that first) -> the dtype of their products, or None where they do not. They run in eager
        mode with the C kernels loaded, every tensor on the CPU, no torch.func transform or ONNX
        capture, and either all float32 with autocast off (float32), or in bfloat16 (all
        bfloat16 and autocast off, or autocast to bfloat16 on float32 / bfloat16 tensors) where
        the kernels have the CPU's bfloat16 dot products."""
        if self.lib is None or not self.eager or self.transformed or self.onnx \
                or any(t.device.type != "cpu" for t in tensors):
            return None
        dtypes = {t.dtype for t in tensors}
        if self.autocast is not None:
            if self.autocast != torch.bfloat16 or not dtypes <= {torch.float32, torch.bfloat16}:
                return None
            dtypes = {torch.bfloat16}
        if dtypes == {torch.float32}:
            return torch.float32
        if dtypes == {torch.bfloat16} and self.lib.bf16_dot():
            return torch.bfloat16
        return None

    def cell(self, x: torch.Tensor, affine: bool = False) -> str | None:
        """One LN cell step's path (``cell.lstm_cell`` / ``gru_cell`` / ``rnn_cell``): None under
        autocast (the module's readable step runs, cast as torch casts its cells); "c" (the C
        step) for a cell with its affine parameters (``affine``) on x in float32, or in a half
        type on a CPU without native half GEMMs from 2 rows up, where ``c`` answers; else
        "reference". (In a half type the C step converts the weights to float32 at every step,
        ~25 us for 64K values: measured faster than the half-type torch ops from 2 rows up,
        bfloat16, I 64, H 128, 1 thread: 0.87x at B = 2, 0.47x at B = 8; slower for one row.)"""
        if self.autocast is not None:
            return None
        if not affine:
            return "reference"
        if x.dtype in (torch.bfloat16, torch.float16):
            if half_gemm_native(x.dtype) or x.shape[0] < 2:
                return "reference"
            return "c" if self.c(x, dtypes=(x.dtype,)) is not None else "reference"
        return "c" if self.c(x) is not None else "reference"

    def linear(self, x: torch.Tensor, w: torch.Tensor) -> str:
        """The input GEMM's path (``gemm.input_linear``, x (T, B, K), w (N, K)): "linear"
        (``F.linear``) outside eager mode and wherever none of these applies; "float32" for a
        bfloat16 / float16 product (half tensors, or under autocast) on a CPU without native half
        GEMMs; "c" (the C kernels' GEMM) where ``c`` answers, x has 3 dimensions, fewer than
        2^31 values, and w's rows are whole panels; "packed" (oneDNN's packed weight) where no
        derivative is wanted (no tensor requires grad, autocast off, no transform)."""
        if not self.eager:
            return "linear"
        half = self.dtype(x)
        if x.is_cpu and half in (torch.bfloat16, torch.float16) and not half_gemm_native(half) \
                and (self.autocast is not None or w.dtype == x.dtype):
            return "float32"
        if self.c(x, w) is not None and x.dim() == 3 and \
                w.shape[0] % self.lib.panel_width() == 0 and 0 < x.numel() < 2 ** 31:
            return "c"
        if not (torch.is_grad_enabled() and (x.requires_grad or w.requires_grad)) and \
                self.autocast is None and not self.transformed:
            return "packed"
        return "linear"


# torch's own questions, looked up once (a cell's step at batch 1 asks them every call)
_compiling, _tracing = torch.compiler.is_compiling, torch._C._is_tracing
_dispatch_modes, _function_modes = (torch._C._len_torch_dispatch_stack,
                                    torch._C._is_torch_function_mode_enabled)
_functorch = torch._C._functorch.peek_interpreter_stack
_autocast_enabled = torch.is_autocast_enabled


def where(x: torch.Tensor, *tensors: torch.Tensor | None, rnn: bool = False) -> Where:
    """Ask the runtime questions for a call on ``x`` and ``tensors`` (entries that are not
    tensors, such as None, ignored); ``rnn``: a call the Triton recurrence kernels can run (the
    LN sequence operators; the others have none: ``triton`` False without asking)."""
    compiling = _compiling()
    onnx = compiling and torch.compiler.is_exporting() and torch.onnx.is_in_onnx_export()
    eager = not (compiling or _tracing() or _dispatch_modes() or _function_modes()) \
        and type(x) in _PLAIN
    if eager:
        for t in tensors:
            if type(t) not in _PLAIN and isinstance(t, torch.Tensor):   # a tensor subclass
                eager = False
                break
    transformed = not compiling and (_functorch() is not None or getattr(
        torch.autograd.forward_ad, "_current_level", -1) >= 0)
    if x.is_cpu:
        lib = load() if USE_NATIVE else None
        autocast = torch.get_autocast_dtype("cpu") if _autocast_enabled("cpu") else None
    else:
        lib = None
        autocast = torch.get_autocast_dtype(x.device.type) if autocast_on(x) else None
    # (on the CPU only where tests interpret the Triton kernels over CPU tensors)
    triton = rnn and (kernels._INTERPRET_CPU or not x.is_cpu) and kernels.applies_rnn(x)
    return Where(lib, eager, transformed, autocast, onnx, triton)


def inference(*tensors: torch.Tensor) -> torch.dtype | None:
    """``sequence.choose_inference``'s answer: None where a backward wants what the inference
    kernels do not save (asked first), else ``where(*tensors).inference(tensors)``."""
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return None
    return where(*tensors).inference(tensors)

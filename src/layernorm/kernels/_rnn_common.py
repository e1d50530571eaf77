"""What the LN-LSTM and LN-GRU step kernels (``_rnn_lstm``, ``_rnn_gru``) share: the @triton.jit
helpers for one example's LN statistics and LN backward over H-wide gate blocks, and the host-side
checks and launch sizes."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..recurrence.lengths import check_lengths
from .reference import REFERENCE


@triton.jit
def _tanh(x):
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x >= 0, t, -t)


@triton.jit
def _ld(ptr, cols, m):
    return tl.load(ptr + cols, mask=m, other=0.0).to(tl.float32)


@triton.jit
def _acc(ptr, cols, m, v):
    tl.store(ptr + cols, tl.load(ptr + cols, mask=m, other=0.0) + v, mask=m)


@triton.jit
def _center(a, m, H, eps):
    """One H-block's LN statistics -> (a - mean (0 where masked), mean, rstd); variance clamped at
    0, eps inside the sqrt."""
    mu = tl.sum(a, 0) / H
    d = tl.where(m, a - mu, 0.0)
    return d, mu, 1.0 / tl.sqrt(tl.maximum(tl.sum(d * d, 0) / H, 0.0) + eps)


@triton.jit
def _center2(a1, a2, m, H, eps):
    """As ``_center`` for an LN over two H-blocks jointly."""
    mu = (tl.sum(a1, 0) + tl.sum(a2, 0)) / (2 * H)
    d1, d2 = tl.where(m, a1 - mu, 0.0), tl.where(m, a2 - mu, 0.0)
    var = (tl.sum(d1 * d1, 0) + tl.sum(d2 * d2, 0)) / (2 * H)
    return d1, d2, mu, 1.0 / tl.sqrt(tl.maximum(var, 0.0) + eps)


@triton.jit
def _center4(a1, a2, a3, a4, m, H, eps):
    """As ``_center`` for an LN over four H-blocks jointly."""
    mu = (tl.sum(a1, 0) + tl.sum(a2, 0) + tl.sum(a3, 0) + tl.sum(a4, 0)) / (4 * H)
    d1, d2 = tl.where(m, a1 - mu, 0.0), tl.where(m, a2 - mu, 0.0)
    d3, d4 = tl.where(m, a3 - mu, 0.0), tl.where(m, a4 - mu, 0.0)
    var = (tl.sum(d1 * d1, 0) + tl.sum(d2 * d2, 0) + tl.sum(d3 * d3, 0)
           + tl.sum(d4 * d4, 0)) / (4 * H)
    return d1, d2, d3, d4, mu, 1.0 / tl.sqrt(tl.maximum(var, 0.0) + eps)


@triton.jit
def _xhat(x, mu, rs, m):
    """The normalized input recomputed from saved statistics (0 where masked)."""
    return tl.where(m, (x - mu) * rs, 0.0)


@triton.jit
def _ln_backward1(w, xhat, rs, H):
    """d(input) of an LN over one H-block, w = gain * dy: rs (w - xhat mean(w xhat) - mean(w))."""
    return (w - xhat * (tl.sum(w * xhat, 0) / H) - tl.sum(w, 0) / H) * rs


@triton.jit
def _dh_in(GOUT, DH, DHMM, LEN, t, b, cols, m, HAS_LEN: tl.constexpr, HAS_DHMM: tl.constexpr):
    """The gradient reaching h_t: from the output (0 past the example's length), from step t+1
    (direct, and through its GEMM when ``HAS_DHMM``)."""
    gout = _ld(GOUT, cols, m)
    if HAS_LEN:  # past its length the output is the constant 0
        gout = tl.where(t < tl.load(LEN + b), gout, 0.0)
    dh = _ld(DH, cols, m) + gout
    if HAS_DHMM:
        dh += _ld(DHMM, cols, m)
    return dh


# ---------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------
# Host side
# ---------------------------------------------------------------------------------------------

def _block(H: int) -> tuple[int, int]:
    """(BLOCK_H, num_warps) for one example's H-wide gate blocks."""
    block = max(16, triton.next_power_of_2(H))
    return block, max(1, min(16, block // 64))


def _lengths(lengths, T: int, B: int, device) -> torch.Tensor | None:
    """(B,) int32 lengths on the device, or None when every example runs all T steps; checked by
    the package's one length check (``layernorm.recurrence.lengths``)."""
    if lengths is None:
        return None
    lengths = check_lengths(lengths, T, B)
    if not B or int(lengths.min()) == T:
        return None
    return lengths.to(device=device, dtype=torch.int32)


def _check_pairs(who: str, gain_x, bias_x):
    if (gain_x is None) != (bias_x is None):
        raise ValueError(f"{who} expected gain_x and bias_x together (the input LN's gain and "
                         f"bias) or neither, received only one. Pass both, or None.")


def _c(x):
    return None if x is None else x.detach().contiguous()


def _masks(xg, h_mask, *zones):
    """The recurrent regularizers' masks (already checked by ``layernorm.ops``): h_mask in the
    state's dtype (it multiplies h before the GEMM), the zoneout tensors in float32 (the
    kernels' arithmetic); detached, contiguous, None where off."""
    h_mask = None if h_mask is None else h_mask.detach().to(xg.dtype).contiguous()
    return (h_mask, *(None if z is None else z.detach().to(torch.float32).contiguous()
                      for z in zones))


def reference_grads(cell: str, inputs: tuple, lens, eps: float, masks: tuple, needs_input_grad,
                    grads: tuple) -> list:
    """The backward under ``create_graph=True`` (a gradient that autograd differentiates again):
    the gradients of the reference recurrence (``layernorm.recurrence``'s step in its loop, the
    same function the CPU operators differentiate for second order), ``REFERENCE[cell]``, as
    differentiable functions of ``inputs`` and ``grads``. -> one gradient or None per input."""
    if cell not in REFERENCE:
        raise RuntimeError(f"no reference recurrence registered for {cell!r}: import "
                           f"layernorm (its operators register them) before differentiating twice.")
    return REFERENCE[cell](inputs, lens, eps, masks, needs_input_grad, grads)

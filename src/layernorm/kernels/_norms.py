"""LayerNorm and RMSNorm in Triton, forward and backward (imported only when a kernel runs).

Layer norm (the paper's eq. 3) and RMSNorm, for each row x of N units (the trailing
``normalized_shape`` flattened)::

    mu    = mean(x)                    (0 for RMSNorm)
    rstd  = 1 / sqrt(mean((x - mu)^2) + eps)
    y     = (x - mu) * rstd * g + b    (no b for RMSNorm)

Forward: one program per row, statistics in float32. Rows of at most ``ONE_BLOCK_MAX`` units are
read once into registers (one read, one write); longer rows are read once for the statistics
(sums shifted by the row's first value, so the variance keeps its digits) and once for the output.
Backward: ``dx = rstd * (g dy - xhat mean(g dy xhat) - mean(g dy))`` (no centering term for
RMSNorm), rows split over a fixed number of programs, each of which also sums its rows'
``dy * xhat`` and ``dy`` into one row of float32 partials; the gain/bias gradients are the column
sums of those partials.
"""
from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

ONE_BLOCK_MAX = 8192   # rows up to this many units live in registers (one read) in the forward
ONE_BLOCK_MAX_BACKWARD = 4096  # the backward keeps more per unit (no spills at 4096, 16 warps)
CHUNK = 4096           # the column chunk of longer rows
# fused multiply-add on (triton's current default), asked for explicitly: triton >= 3.9 warns when
# it is left to the default
LAUNCH = {"enable_fp_fusion": True}


@triton.jit
def _norm_forward(X, Y, W, Bias, Mean, Rstd, N, eps,
                  CENTER: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr,
                  BLOCK: tl.constexpr, ONE_BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = X + row * N
    y_row = Y + row * N
    cols = tl.arange(0, BLOCK)
    if ONE_BLOCK:
        m = cols < N
        x = tl.load(x_row + cols, mask=m, other=0.0).to(tl.float32)
        d = x
        if CENTER:
            mean = tl.sum(x, axis=0) / N
            d = tl.where(m, x - mean, 0.0)
            tl.store(Mean + row, mean)
        var = tl.maximum(tl.sum(d * d, axis=0) / N, 0.0)
        rstd = 1.0 / tl.sqrt(var + eps)
        y = d * rstd
        if HAS_W:
            y = y * tl.load(W + cols, mask=m, other=0.0).to(tl.float32)
        if HAS_B:
            y = y + tl.load(Bias + cols, mask=m, other=0.0).to(tl.float32)
        tl.store(y_row + cols, y.to(Y.dtype.element_ty), mask=m)
    else:
        # statistics in one read: sums of (x - K), K = the row's first value
        shift = 0.0
        if CENTER:
            shift = tl.load(x_row).to(tl.float32)
        s1 = tl.zeros([BLOCK], dtype=tl.float32)
        s2 = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, N, BLOCK):
            m = start + cols < N
            x = tl.load(x_row + start + cols, mask=m, other=0.0).to(tl.float32)
            d = tl.where(m, x - shift, 0.0)
            s1 += d
            s2 += d * d
        var = tl.sum(s2, axis=0) / N
        mean = 0.0
        if CENTER:
            m1 = tl.sum(s1, axis=0) / N
            var = tl.maximum(var - m1 * m1, 0.0)
            mean = shift + m1
            tl.store(Mean + row, mean)
        rstd = 1.0 / tl.sqrt(var + eps)
        for start in range(0, N, BLOCK):
            m = start + cols < N
            x = tl.load(x_row + start + cols, mask=m, other=0.0).to(tl.float32)
            y = (x - mean) * rstd
            if HAS_W:
                y = y * tl.load(W + start + cols, mask=m, other=0.0).to(tl.float32)
            if HAS_B:
                y = y + tl.load(Bias + start + cols, mask=m, other=0.0).to(tl.float32)
            tl.store(y_row + start + cols, y.to(Y.dtype.element_ty), mask=m)
    tl.store(Rstd + row, rstd)


@triton.jit
def _norm_backward(DY, X, W, Mean, Rstd, DX, DW, DB, n_rows, N, rows_per_program,
                   CENTER: tl.constexpr, HAS_W: tl.constexpr, BLOCK: tl.constexpr,
                   ONE_BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    row_start = pid.to(tl.int64) * rows_per_program  # int64 rows: offsets past 2^31 elements
    row_end = tl.minimum(row_start + rows_per_program, n_rows)
    cols = tl.arange(0, BLOCK)
    part = pid.to(tl.int64) * N  # this program's row of the (programs, N) partial sums
    if ONE_BLOCK:
        m = cols < N
        if HAS_W:
            w = tl.load(W + cols, mask=m, other=0.0).to(tl.float32)
        dw = tl.zeros([BLOCK], dtype=tl.float32)
        db = tl.zeros([BLOCK], dtype=tl.float32)
        for row in range(row_start, row_end):
            off = row * N
            x = tl.load(X + off + cols, mask=m, other=0.0).to(tl.float32)
            dy = tl.load(DY + off + cols, mask=m, other=0.0).to(tl.float32)
            mean = tl.load(Mean + row)
            rstd = tl.load(Rstd + row)
            xhat = tl.where(m, (x - mean) * rstd, 0.0)
            wdy = dy
            if HAS_W:
                wdy = dy * w
            c1 = tl.sum(wdy * xhat, axis=0) / N
            dx = wdy - xhat * c1
            if CENTER:
                dx = dx - tl.sum(wdy, axis=0) / N
            dx = dx * rstd
            tl.store(DX + off + cols, dx.to(DX.dtype.element_ty), mask=m)
            dw += dy * xhat
            db += dy
        tl.store(DW + part + cols, dw, mask=m)
        tl.store(DB + part + cols, db, mask=m)
    else:
        for row in range(row_start, row_end):
            off = row * N
            mean = tl.load(Mean + row)
            rstd = tl.load(Rstd + row)
            a1 = tl.zeros([BLOCK], dtype=tl.float32)
            a2 = tl.zeros([BLOCK], dtype=tl.float32)
            for start in range(0, N, BLOCK):
                m = start + cols < N
                x = tl.load(X + off + start + cols, mask=m, other=0.0).to(tl.float32)
                dy = tl.load(DY + off + start + cols, mask=m, other=0.0).to(tl.float32)
                if HAS_W:
                    dy = dy * tl.load(W + start + cols, mask=m, other=0.0).to(tl.float32)
                xhat = tl.where(m, (x - mean) * rstd, 0.0)
                a1 += dy * xhat
                a2 += dy
            c1 = tl.sum(a1, axis=0) / N
            c2 = 0.0
            if CENTER:
                c2 = tl.sum(a2, axis=0) / N
            for start in range(0, N, BLOCK):
                m = start + cols < N
                x = tl.load(X + off + start + cols, mask=m, other=0.0).to(tl.float32)
                dy = tl.load(DY + off + start + cols, mask=m, other=0.0).to(tl.float32)
                xhat = tl.where(m, (x - mean) * rstd, 0.0)
                wdy = dy
                if HAS_W:
                    wdy = dy * tl.load(W + start + cols, mask=m, other=0.0).to(tl.float32)
                dx = (wdy - xhat * c1 - c2) * rstd
                tl.store(DX + off + start + cols, dx.to(DX.dtype.element_ty), mask=m)
                p = part + start + cols
                tl.store(DW + p, tl.load(DW + p, mask=m, other=0.0) + dy * xhat, mask=m)
                tl.store(DB + p, tl.load(DB + p, mask=m, other=0.0) + dy, mask=m)


def _config(N: int, backward: bool = False) -> tuple[int, bool, int]:
    """(BLOCK, ONE_BLOCK, num_warps) for rows of N units."""
    one = N <= (ONE_BLOCK_MAX_BACKWARD if backward else ONE_BLOCK_MAX)
    block = max(16, triton.next_power_of_2(N)) if one else CHUNK
    return block, one, max(1, min(16, block // 256))


@functools.lru_cache(maxsize=None)
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def _programs(n_rows: int, device: torch.device) -> int:
    """Programs of the backward: a few per SM (each sums its rows' gain/bias partials)."""
    if device.type == "cuda":
        return max(1, min(n_rows, 4 * _sm_count(device.index or 0)))
    return max(1, min(n_rows, 4))  # the interpreter on CPU tensors (tests)


def norm_forward(x2: torch.Tensor, weight, bias, eps: float, center: bool):
    """x2: (rows, N) contiguous -> (y, mean, rstd), y in x2's dtype, statistics float32."""
    n_rows, N = x2.shape
    y = torch.empty_like(x2)
    mean = torch.zeros(n_rows, dtype=torch.float32, device=x2.device)  # stays 0 for RMSNorm
    rstd = torch.empty(n_rows, dtype=torch.float32, device=x2.device)
    block, one, warps = _config(N)
    _norm_forward[(n_rows,)](x2, y, weight if weight is not None else x2,
                             bias if bias is not None else x2, mean, rstd, N, eps,
                             CENTER=center, HAS_W=weight is not None, HAS_B=bias is not None,
                             BLOCK=block, ONE_BLOCK=one, num_warps=warps, **LAUNCH)
    return y, mean, rstd


def norm_backward(dy2: torch.Tensor, x2: torch.Tensor, weight, mean, rstd, center: bool):
    """-> (dx, dw partial column sums (float32 (N,)), db (float32 (N,)))."""
    n_rows, N = x2.shape
    dx = torch.empty_like(x2)
    progs = _programs(n_rows, x2.device)
    per = triton.cdiv(n_rows, progs)
    progs = triton.cdiv(n_rows, per)
    dw = torch.zeros(progs, N, dtype=torch.float32, device=x2.device)
    db = torch.zeros(progs, N, dtype=torch.float32, device=x2.device)
    block, one, warps = _config(N, backward=True)
    _norm_backward[(progs,)](dy2, x2, weight if weight is not None else x2, mean, rstd, dx, dw, db,
                             n_rows, N, per, CENTER=center, HAS_W=weight is not None,
                             BLOCK=block, ONE_BLOCK=one, num_warps=warps, **LAUNCH)
    return dx, dw.sum(0), db.sum(0)

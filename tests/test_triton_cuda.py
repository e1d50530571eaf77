"""The compiled Triton kernels on a CUDA device, at training sizes (skipped without CUDA).

tests/test_triton.py checks the kernels' math against the float64 references at tiny shapes
(interpreted without a GPU). Here: the sizes the kernels are meant for (H = 1024, several warps
per row, T = 32 steps), bf16, the modules end to end, and the torch-ops paths as a second opinion.
"""
from __future__ import annotations

import importlib.util

import pytest
import torch
from torch.nn.utils.rnn import pack_sequence

from tests.reference import ref_ln_lstm_sequence, ref_rms_norm

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                       reason="triton is not installed (pip install 'layernorm[gpu]')"),
]


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| / max |b|."""
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-12))


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-4), (torch.bfloat16, 3e-2)])
@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_modules_match_the_torch_ops_path(monkeypatch, mode, dtype, tol):
    """layernorm.LSTM / GRU, H = 1024, variable lengths: outputs and every parameter's gradient
    of the Triton path against the same module with the kernels switched off (torch ops)."""
    import layernorm
    import layernorm.kernels as K
    torch.manual_seed(0)
    m = getattr(layernorm, mode)(256, 1024, num_layers=2).cuda().to(dtype)
    seqs = [torch.randn(n, 256, device="cuda", dtype=dtype) for n in (32, 17, 1, 32)]
    x = pack_sequence(seqs, enforce_sorted=False)
    results = []
    for enabled in (True, False):
        monkeypatch.setattr(K, "ENABLED", enabled)
        out, state = m(x)
        h = state[0]
        loss = out.data.float().square().sum() + h.float().sum()
        grads = torch.autograd.grad(loss, list(m.parameters()))
        results.append((out.data, h, grads))
    (out, h, grads), (out_ref, h_ref, grads_ref) = results
    assert _rel(out, out_ref) < tol and _rel(h, h_ref) < tol
    for (name, _), g, r in zip(m.named_parameters(), grads, grads_ref):
        assert torch.isfinite(g).all(), name
        assert _rel(g, r) < tol * 3, (name, _rel(g, r))


def test_lstm_kernel_matches_float64_reference_at_size():
    import layernorm.kernels as K
    T, B, H = 16, 8, 1024
    g = torch.Generator(device="cuda").manual_seed(0)

    def r(*shape, scale=1.0, mean=0.0):
        return (mean + scale * torch.randn(*shape, device="cuda", generator=g)).requires_grad_()
    ts = [r(T, B, 4 * H), r(B, H, scale=0.5), r(B, H, scale=0.5), r(4 * H, H, scale=H ** -0.5),
          r(4 * H, scale=0.2, mean=1), r(4 * H, scale=0.2), r(H, scale=0.2, mean=1),
          r(H, scale=0.2)]
    lengths = torch.tensor([16, 0, 5, 16, 9, 1, 16, 3])
    outs = K.ln_lstm_sequence(*ts, lengths=lengths)
    d = [t.detach().double().requires_grad_() for t in ts]
    refs = ref_ln_lstm_sequence(*d, lengths=lengths)
    for a, b in zip(outs, refs):
        assert _rel(a, b) < 1e-5
    up = [torch.randn_like(o) for o in outs]
    for a, b in zip(torch.autograd.grad(outs, ts, up),
                    torch.autograd.grad(refs, d, [u.double() for u in up])):
        assert _rel(a, b) < 1e-4


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_norm_modules_at_size(dtype):
    """layernorm.RMSNorm through the Triton kernel vs the float64 reference, 4096 x 4096, and
    a row longer than one block (the chunked path)."""
    import layernorm
    for shape in ((4096, 4096), (4, 20000)):
        x = torch.randn(shape, device="cuda", dtype=dtype, requires_grad=True)
        m = layernorm.RMSNorm(shape[-1]).cuda().to(dtype)
        with torch.no_grad():
            m.weight.uniform_(0.5, 1.5)
        y = m(x)
        ref = ref_rms_norm(x.detach(), 1, m.weight.detach())
        assert _rel(y, ref) < (1e-5 if dtype == torch.float32 else 1e-2)
        dy = torch.randn_like(y)
        dx, dw = torch.autograd.grad(y, (x, m.weight), dy)
        x64, w64 = x.detach().double().requires_grad_(), m.weight.detach().double() \
            .requires_grad_()
        rx, rw = torch.autograd.grad(ref_rms_norm(x64, 1, w64), (x64, w64), dy.double())
        assert _rel(dx, rx) < (1e-4 if dtype == torch.float32 else 2e-2)
        assert _rel(dw, rw) < (1e-4 if dtype == torch.float32 else 2e-2)

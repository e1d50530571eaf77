"""``layernorm.recurrence``, the reference equations: its step functions and its time loop against
the test-side float64 reference (tests/reference.py), the two length encodings of the loop, the
one length check, and the package's place below the rest of layernorm (it imports torch only)."""
import ast
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from layernorm import recurrence
from layernorm.recurrence import lengths as L
from tests.reference import ref_ln_gru_sequence, ref_ln_lstm_sequence

TOL = {"atol": 1e-10, "rtol": 1e-9}


def _lstm(T, B, H):
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    return (r(T, B, 4 * H), r(B, H), r(B, H), r(4 * H, H) * 0.5, 1 + 0.1 * r(4 * H), r(4 * H),
            1 + 0.1 * r(H), r(H))


def _lstm_step(w_hh, gain_h, bias_h, gain_c, bias_c):
    G = w_hh.shape[0]
    norm_hh = lambda a, t: F.layer_norm(a, (G,), gain_h, bias_h)  # noqa: E731
    norm_c = lambda a, t: F.layer_norm(a, (G // 4,), gain_c, bias_c)  # noqa: E731
    return lambda x, s, t: recurrence.lstm_step(x, s[0], s[1], w_hh, norm_hh, norm_c, t)


@pytest.mark.parametrize("lengths", [None, [5, 5, 3, 1, 0], [5, 4, 4, 2, 2]])
def test_loop_of_the_lstm_step_is_the_reference_with_both_length_encodings(lengths):
    """run_direction over lstm_step equals tests/reference.py; a batch sorted by decreasing length
    gives the same outputs, final states and gradients as a mask or as batch_sizes."""
    T, B, H = 5, 5, 3
    xg, h0, c0, w_hh, *norms = [t.requires_grad_() for t in _lstm(T, B, H)]
    step = _lstm_step(w_hh, *norms)
    lens = None if lengths is None else torch.tensor(lengths)
    ref = ref_ln_lstm_sequence(xg, h0, c0, w_hh, *norms, lengths=lens)
    mask = None if lens is None else (torch.arange(T).unsqueeze(1) < lens).unsqueeze(-1)
    by_mask = recurrence.run_direction(step, xg, (h0, c0), mask)
    _, batch_sizes = L.from_lengths(lens, T, B)
    by_sizes = recurrence.run_direction(step, xg, (h0, c0), batch_sizes=batch_sizes)
    inputs = [xg, h0, c0, w_hh, *norms]
    for out, (h, c) in (by_mask, by_sizes):
        for a, b in zip((out, h, c), ref):
            torch.testing.assert_close(a, b, **TOL)
    grads = [torch.autograd.grad(out.sin().sum() + h.sum() + c.square().sum(), inputs)
             for out, (h, c) in (by_mask, by_sizes)]
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, **TOL)


def test_gru_step_with_layer_norm_terms_is_the_reference():
    T, B, H = 4, 3, 2
    g = torch.Generator().manual_seed(1)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    xg, h0, w_hh = r(T, B, 3 * H), r(B, H), r(3 * H, H)
    gain_h, bias_h, gain_u, bias_u = 1 + 0.1 * r(2 * H), r(2 * H), 1 + 0.1 * r(H), r(H)

    def norm_hh(a, t):
        return torch.cat([F.layer_norm(a[:, :2 * H], (2 * H,), gain_h, bias_h),
                          F.layer_norm(a[:, 2 * H:], (H,), gain_u, bias_u)], -1)
    lens = torch.tensor([4, 2, 1])
    _, batch_sizes = L.from_lengths(lens, T, B)
    out, (h,) = recurrence.run_direction(lambda x, s, t: recurrence.gru_step(x, s[0], w_hh,
                                                                               norm_hh),
                                         xg, (h0,), batch_sizes=batch_sizes)
    ref = ref_ln_gru_sequence(xg, h0, w_hh, gain_h, bias_h, gain_u, bias_u, lengths=lens)
    torch.testing.assert_close(out, ref[0], **TOL)
    torch.testing.assert_close(h, ref[1], **TOL)


def test_one_length_check_and_back():
    """The lengths check (shared by the fused operators and the Triton kernels) and the round
    trip lengths -> (order, batch_sizes) -> lengths in the caller's order."""
    with pytest.raises(ValueError, match=r"lengths must lie in \[0, T=3\]"):
        L.check_lengths(torch.tensor([4, 1]), 3, 2)
    for bad in (torch.tensor([1.0, 2.0]), torch.tensor([True, False]), torch.tensor([1, 2, 3])):
        with pytest.raises(ValueError, match="integer tensor of shape"):
            L.check_lengths(bad, 3, 2)
    with pytest.raises(ValueError, match="non-increasing"):
        L.encode("f", None, torch.tensor([1, 2, 0]), 3, 2)
    with pytest.raises(ValueError, match="both lengths and batch_sizes"):
        L.encode("f", torch.tensor([1, 2]), torch.tensor([2, 1, 0]), 3, 2)
    lens = torch.tensor([2, 0, 3, 3, 1])
    order, batch_sizes = L.encode("f", lens, None, 3, 5)
    assert batch_sizes.tolist() == [4, 3, 2]
    assert torch.equal(L.to_lengths(order, batch_sizes, 5), lens)
    assert L.encode("f", torch.tensor([3, 3]), None, 3, 2) == (None, None)


def test_a_modules_packed_lengths_are_checked_once(monkeypatch):
    """A stacked module checks its PackedSequence's batch_sizes where it enters; the operators of
    its layers and directions take them as checked (no second validation), until the tensor
    changes in place, which is checked again."""
    import layernorm
    from torch.nn.utils.rnn import pack_sequence
    validations = []
    real = L._validate
    monkeypatch.setattr(L, "_validate", lambda *a: validations.append(a) or real(*a))
    m = layernorm.LSTM(3, 4, num_layers=2, bidirectional=True)
    packed = pack_sequence([torch.randn(n, 3) for n in (4, 2, 1)])
    m(packed)
    assert validations == []
    bs = packed.batch_sizes
    assert L.check_batch_sizes("f", bs, 4, 3) is bs and validations == []
    bs[2] = 3                                    # changed in place: checked again
    with pytest.raises(ValueError, match="non-increasing"):
        L.check_batch_sizes("f", bs, 4, 3)
    assert len(validations) == 1


def test_recurrence_imports_torch_only():
    """The reference sits below the rest of layernorm: its files import torch (and each other)
    only, so no fast path can leak into the equations they are tested against."""
    for path in Path(recurrence.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                roots = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                roots = [] if node.level else [node.module.split(".")[0]]
            else:
                continue
            assert set(roots) <= {"torch", "__future__", "typing"}, (path.name, roots)

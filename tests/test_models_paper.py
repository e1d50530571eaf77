"""The reusable models of the paper's section 6 experiments (layernorm_paper.models): shapes, finite
losses, a gradient for every parameter, and the structure each section prescribes."""
import math

import pytest
import torch
import torch.nn.functional as F

from layernorm_paper.data import load_dataset
from layernorm_paper.models import DRAW, AttentiveReader, CellNormLSTMCell, HandwritingMDN


@pytest.fixture(autouse=True)
def _paper_data():
    # Registers the paper's datasets when a test runs, not when pytest collects this file, so
    # the dataset registry other test files see at collection is the package's own.
    import layernorm_paper.models.paper  # noqa: F401


def _every_parameter_gets_a_gradient(model, loss):
    model.zero_grad(set_to_none=True)
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, f"{name} got no gradient"
        assert torch.isfinite(p.grad).all(), f"{name} has a non-finite gradient"
        assert p.grad.abs().sum() > 0, f"{name} got an all-zero gradient"


# ----------------------------------------------------------------------------- DRAW (6.4)
def test_cell_norm_cell_without_norm_is_torch_lstm_cell():
    ours = CellNormLSTMCell(5, 7, cell_norm=False)
    ref = torch.nn.LSTMCell(5, 7)
    with torch.no_grad():
        for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(ref, n).copy_(getattr(ours, n))
    x, h, c = torch.randn(3, 5), torch.randn(3, 7), torch.randn(3, 7)
    for a, b in zip(ours(x, (h, c)), ref(x, (h, c))):
        torch.testing.assert_close(a, b)


def test_draw_cell_normalizes_the_cell_only():
    """h = sigmoid(o) * tanh(LN(c)); the gates and the carried c are those of a plain LSTM."""
    cell = CellNormLSTMCell(5, 7, cell_norm=True)
    with torch.no_grad():
        cell.gain_c.uniform_(0.5, 1.5)
        cell.bias_c.uniform_(-0.5, 0.5)
    ref = torch.nn.LSTMCell(5, 7)
    with torch.no_grad():
        for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(ref, n).copy_(getattr(cell, n))
    x, h, c = torch.randn(3, 5), torch.randn(3, 7), torch.randn(3, 7)
    h1, c1 = cell(x, (h, c))
    _, c_ref = ref(x, (h, c))
    torch.testing.assert_close(c1, c_ref)              # carried c: not normalized
    o = (x @ cell.weight_ih.T + cell.bias_ih + h @ cell.weight_hh.T + cell.bias_hh).chunk(4, -1)[3]
    mu, var = c1.mean(-1, keepdim=True), c1.var(-1, unbiased=False, keepdim=True)
    ln = (c1 - mu) / torch.sqrt(var + 1e-5) * cell.gain_c + cell.bias_c
    torch.testing.assert_close(h1, torch.sigmoid(o) * torch.tanh(ln))
    names = {n for n, _ in DRAW(64, 8, 2, 2, norm="layer").named_parameters()}
    assert {"encoder.gain_c", "decoder.gain_c", "encoder.bias_c", "decoder.bias_c"} <= names
    assert not any("gain_ih" in n or "gain_hh" in n for n in names)   # gates unnormalized
    assert not any("gain" in n for n, _ in DRAW(64, 8, 2, 2, norm="none").named_parameters())


@pytest.mark.parametrize("norm", ["none", "layer"])
def test_draw_negative_elbo_shape_gradients_and_eval_determinism(norm):
    x = load_dataset("digits-binary").x_train[:16]
    model = DRAW(64, hidden=8, z_dim=3, glimpses=3, norm=norm)
    t = model.terms(x)
    nelbo = model(x)
    assert nelbo.shape == (16,) and torch.isfinite(nelbo).all()
    assert (t["recon"] > 0).all() and (t["kl"] >= 0).all()
    # the Bernoulli term is the binary cross-entropy of the canvas, summed over pixels
    torch.testing.assert_close(t["recon"], F.binary_cross_entropy_with_logits(
        t["logits"], x, reduction="none").sum(-1))
    _every_parameter_gets_a_gradient(model, nelbo.mean())
    model.eval()
    torch.testing.assert_close(model(x), model(x), rtol=0, atol=0)


def test_draw_rejects_batch_norm_and_bad_shapes():
    with pytest.raises(ValueError, match="none"):
        DRAW(64, norm="batch")
    with pytest.raises(ValueError, match=r"\(N, 64\)"):
        DRAW(64, 8, 2, 2)(torch.zeros(2, 8, 8))


# ----------------------------------------------------------------------------- MDN (6.5)
def _reference_point_nll(model, x):
    """Mixture of torch.distributions' bivariate normals + Bernoulli, one point at a time."""
    out, _ = model.lstm(torch.tanh(F.linear(x[:, :-1], model.embed[0].weight, model.embed[0].bias)))
    p = model.head(out)
    M = model.mixtures
    log_pi = torch.log_softmax(p[..., 1:1 + M], -1)
    mu_x, mu_y, s_x, s_y, r = p[..., 1 + M:].split(M, -1)
    sx, sy = model.sigma_min + F.softplus(s_x), model.sigma_min + F.softplus(s_y)
    rho = model.rho_max * torch.tanh(r)
    cov = torch.stack([torch.stack([sx * sx, rho * sx * sy], -1),
                       torch.stack([rho * sx * sy, sy * sy], -1)], -2)
    dist = torch.distributions.MultivariateNormal(torch.stack([mu_x, mu_y], -1), cov)
    log_n = dist.log_prob(x[:, 1:, None, :2].expand(-1, -1, M, -1))
    eos = torch.distributions.Bernoulli(logits=p[..., 0]).log_prob(x[:, 1:, 2])
    return -(torch.logsumexp(log_pi + log_n, -1) + eos)


@pytest.mark.parametrize("norm", ["none", "batch", "layer"])
def test_mdn_nll_matches_reference_and_gradients(norm):
    x = load_dataset("pen-strokes", length=12, n_train=8, n_test=2).x_train.double()
    model = HandwritingMDN(hidden=8, layers=2, mixtures=3, norm=norm, max_length=12).double()
    nll = model(x)
    assert nll.shape == (8,) and torch.isfinite(nll).all()
    torch.testing.assert_close(model.point_nll(x), _reference_point_nll(model, x))
    assert (model.point_nll(x) >= model.nll_floor_per_step).all()
    _every_parameter_gets_a_gradient(model, nll.mean())


def test_mdn_lengths_score_only_the_prefix():
    model = HandwritingMDN(hidden=8, layers=1, mixtures=2, norm="layer", max_length=12).eval()
    x = load_dataset("pen-strokes", length=12, n_train=4, n_test=1).x_train
    full = model(x)
    torch.testing.assert_close(model(x, lengths=torch.full((4,), 12)), full)
    short = model(x, lengths=torch.tensor([5, 12, 3, 12]))
    torch.testing.assert_close(short[0], model(x[:1, :5])[0])
    torch.testing.assert_close(short[2], model(x[2:3, :3])[0])


@pytest.mark.parametrize("scale", [0.5, 3.0])
def test_mdn_ln_lstm_prediction_depends_on_the_length_of_the_offsets(scale):
    """Layer norm of ``W_x x`` is invariant to re-scaling x (paper 5.1, Table 1): an LN-LSTM
    reading the raw (dx, dy, end_of_stroke) cannot tell a stroke from the same stroke drawn
    ``scale`` times as large. The tanh embedding before the LSTM makes the prediction change."""
    torch.manual_seed(0)
    x = load_dataset("pen-strokes", length=12, n_train=4, n_test=1).x_train.double()
    x[..., 2] = 0           # one stroke per sequence: no pen-up bit to carry the length
    scaled = x.clone()
    scaled[..., :2] *= scale
    model = HandwritingMDN(hidden=8, layers=2, mixtures=3, norm="layer", max_length=12).double()
    with torch.no_grad():
        change = max(float((a - b).abs().max())
                     for a, b in zip(model.mixture(x), model.mixture(scaled)))
    assert change > 1e-2, f"the prediction moved by {change:.2e} only"
    _every_parameter_gets_a_gradient(model, model(scaled).mean())


def test_mdn_rejects_an_embedding_width_below_1():
    for bad in (0, -3, 2.5):
        with pytest.raises(ValueError, match=r"embed >= 1.*Pass e.g. embed=32"):
            HandwritingMDN(embed=bad)


# ----------------------------------------------------------------------------- reader (6.2)
@pytest.mark.parametrize("norm,gain", [("none", None), ("batch", None), ("layer", 1.0),
                                       ("layer", 0.1)])
def test_reader_logits_candidates_attention_and_gradients(norm, gain):
    ds = load_dataset("cloze", n_train=32, n_test=4, n_facts=3)
    T = ds.info["passage_len"]
    model = AttentiveReader(ds.vocab_size, ds.num_classes, T, hidden=8, embed=8, norm=norm,
                            gain_init=gain)
    if gain is not None:
        assert all(abs(float(p.detach().flatten()[0]) - gain) < 1e-6 for n, p in model.named_parameters()
                   if n.split(".")[-1].startswith("gain"))
    x = ds.x_train
    logits, attention = model.attend(x)
    assert logits.shape == (32, ds.num_classes) and attention.shape == (32, T)
    torch.testing.assert_close(attention.sum(-1), torch.ones(32))
    in_passage = (x[:, :T, None] == torch.arange(ds.num_classes)).any(1)
    assert torch.isinf(logits[~in_passage]).all() and torch.isfinite(logits[in_passage]).all()
    assert in_passage[torch.arange(32), ds.y_train].all()          # the answer is a candidate
    loss = F.cross_entropy(logits, ds.y_train)
    assert math.isfinite(loss.item())
    _every_parameter_gets_a_gradient(model, loss)

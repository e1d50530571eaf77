"""The cells' step as one autograd node (``ops.cell``): at one row the products run inside the
same C call as the step (``lstm_cell_forward`` / ``gru_cell_forward``), at more rows through
torch's GEMM. Both against the float64 reference step (``recurrence.ln_*_step`` then
``recurrence.zone_update``) with every regularizer mask, first and second order, every input's
gradient or only some; and the C struct kept from call to call sees the parameters as they are
now (updated in place, replaced)."""
import pytest
import torch
from torch import nn

import layernorm as L
from layernorm import ops, recurrence
from layernorm.ops import native
from tests.reference import assert_step_matches

pytestmark = pytest.mark.skipif(native.load() is None,
                                reason="the C kernels do not load here")

EPS = 1e-5
TOL = {"atol": 3e-4, "rtol": 3e-4}        # float32 against float64


def _inputs(cell, B, I, H, seed):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    G = (4 if cell == "lstm" else 3) * H
    state = [r(B, H), r(B, H)] if cell == "lstm" else [r(B, H)]
    aff = [1 + 0.1 * r(G), r(G), 1 + 0.1 * r(G), r(G)]
    if cell == "lstm":
        aff += [1 + 0.1 * r(H), r(H)]
    masks = {"h_mask": (torch.rand(B, H, generator=g) > 0.4).double() / 0.6,
             "zone_h": torch.rand(B, H, generator=g, dtype=torch.float64),
             "zone_c": torch.rand(B, H, generator=g, dtype=torch.float64)}
    if cell == "gru":
        masks.pop("zone_c")
    return [r(B, I), *state, r(G, I) * 0.5, r(G, H) * 0.5, *aff], masks


def _reference(cell, t, masks):
    if cell == "lstm":
        new = recurrence.ln_lstm_step(*t, EPS, h_mask=masks.get("h_mask"))
        return recurrence.zone_update(new, (t[1], t[2]), (masks.get("zone_h"),
                                                          masks.get("zone_c")))
    new = recurrence.ln_gru_step(*t, EPS, h_mask=masks.get("h_mask"))
    return recurrence.zone_update((new,), (t[1],), (masks.get("zone_h"),))


def _fast(cell, t, masks):
    lib = native.load()
    masks = {k: v.float() for k, v in masks.items()}
    if cell == "lstm":
        return ops.ln_lstm_step(lib, *t, EPS, **masks)
    return (ops.ln_gru_step(lib, *t, EPS, **masks),)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("B", [1, 3])
@pytest.mark.parametrize("which", [(), ("h_mask",), ("zone_h", "zone_c"),
                                   ("h_mask", "zone_h", "zone_c")])
@pytest.mark.parametrize("order", [1, 2])
def test_step_matches_the_float64_reference(cell, B, which, order):
    """Values and every input's gradient (first order through the C backward, second through
    the differentiated reference step) at one row (one C call with its products) and three."""
    t64, masks = _inputs(cell, B, 6, 5, seed=B + 10 * order)
    masks = {k: v for k, v in masks.items() if k in which}
    assert_step_matches(lambda *t: _reference(cell, list(t), masks),
                        lambda *t: _fast(cell, list(t), masks), t64, order, TOL,
                        lambda want: [torch.randn_like(o) for o in want])


@pytest.mark.parametrize("cell,I,H", [("lstm", 37, 130), ("gru", 37, 130), ("gru", 11000, 1),
                                      ("lstm", 4100, 2), ("lstm", 256, 512), ("gru", 256, 512)])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_one_row_at_a_users_size_splits_its_products_between_threads(cell, I, H, threads):
    """At one row the products' rows of W are split between the threads where the weights are
    large (4H or 3H rows of I + H values, above the split), in groups of four rows: the float64
    step's values and gradients at 1-3 threads. The GRU's 390 rows end in a group of two; 3 rows
    (H 1) are one group shorter than four, and 8 rows two groups for three threads."""
    t64, _ = _inputs(cell, 1, I, H, seed=threads)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        assert_step_matches(lambda *t: _reference(cell, list(t), {}),
                            lambda *t: _fast(cell, list(t), {}), t64, 1, TOL,
                            lambda want: [torch.randn_like(o) for o in want])
        with torch.no_grad():                      # the call that saves nothing
            got = _fast(cell, [t.float() for t in t64], {})
        for u, v in zip(got, _reference(cell, t64, {})):
            torch.testing.assert_close(u.double(), v, **TOL)
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("B", [1, 3])
def test_only_the_gradients_asked_for(cell, B):
    """x without grad, frozen weights, a state without grad: the others' gradients as the
    reference's, and nothing computed for the rest."""
    t64, _ = _inputs(cell, B, 4, 3, seed=7)
    n_state = 2 if cell == "lstm" else 1
    wanted = [1, 1 + n_state + 1] + list(range(3 + n_state, len(t64)))  # h, W_h, the affine
    a64 = [t.clone().requires_grad_(i in wanted) for i, t in enumerate(t64)]
    a32 = [t.float().requires_grad_(i in wanted) for i, t in enumerate(t64)]
    want, got = _reference(cell, a64, {}), _fast(cell, a32, {})
    g64 = torch.autograd.grad(sum(o.sum() for o in want), [a64[i] for i in wanted])
    g32 = torch.autograd.grad(sum(o.sum() for o in got), [a32[i] for i in wanted])
    for u, v in zip(g32, g64):
        torch.testing.assert_close(u.double(), v, **TOL)


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
@pytest.mark.parametrize("B", [1, 2])
def test_kept_struct_sees_parameters_updated_in_place_and_replaced(mode, B):
    """The step's C struct is kept between calls (addresses of the gains and biases): a gain
    changed in place (an optimizer step) and a bias replaced by a new Parameter both show in
    the next call, as in the float64 cell."""
    cell = getattr(L, f"{mode}Cell")(4, 3)
    twin = getattr(L, f"{mode}Cell")(4, 3, dtype=torch.float64)
    x = torch.randn(B, 4)

    def check():
        twin.load_state_dict({k: v.double() for k, v in cell.state_dict().items()})
        for use_grad in (True, False):
            with torch.set_grad_enabled(use_grad):
                got = cell(x)
                want = twin(x.double())
            for u, v in zip(got if mode == "LSTM" else (got,),
                            want if mode == "LSTM" else (want,)):
                torch.testing.assert_close(u.double(), v, **TOL)
    check()
    with torch.no_grad():
        cell.gain_ih.mul_(3).add_(0.5)
        cell.bias_hh.add_(1)
    check()
    cell.bias_ih = nn.Parameter(torch.randn_like(cell.bias_ih))
    check()


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
@pytest.mark.parametrize("I,H", [(3, 0), (0, 4)])
def test_one_row_of_zero_units_or_zero_inputs(mode, I, H):
    """The one-call step with an empty product: torch's cell's shapes, zero gradients of x, and
    (no input) the float64 cell's state."""
    cell = getattr(L, f"{mode}Cell")(I, H)
    twin = getattr(L, f"{mode}Cell")(I, H, dtype=torch.float64)
    twin.load_state_dict({k: v.double() for k, v in cell.state_dict().items()})
    x = torch.randn(1, I, requires_grad=True)
    out = cell(x)
    out = out if isinstance(out, tuple) else (out,)
    assert [tuple(o.shape) for o in out] == [(1, H)] * len(out)
    sum(o.sum() for o in out).backward()
    torch.testing.assert_close(x.grad, torch.zeros(1, I))
    want = twin(x.detach().double())
    for u, v in zip(out, want if isinstance(want, tuple) else (want,)):
        torch.testing.assert_close(u.detach().double(), v, **TOL)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("B", [1, 3])
def test_masks_of_another_dtype_are_taken_in_the_steps(cell, B):
    """A float64 recurrent-dropout or zoneout mask on a float32 step: the float32 mask's result."""
    t64, masks = _inputs(cell, B, 4, 3, seed=3)
    t32 = [t.float() for t in t64]
    lib = native.load()
    step = ops.ln_lstm_step if cell == "lstm" else ops.ln_gru_step
    for name, m in masks.items():
        want = step(lib, *t32, EPS, **{name: m.float()})
        got = step(lib, *t32, EPS, **{name: m})
        for u, v in zip(got if cell == "lstm" else (got,), want if cell == "lstm" else (want,)):
            torch.testing.assert_close(u, v, atol=0, rtol=0)

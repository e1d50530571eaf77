"""Normalized recurrent networks: the paper's equations (tests/reference.py), torch's modules,
variable length, the paper's claims as properties, gradients and bad input."""
import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_sequence, pad_sequence

import layernorm as L
from tests.reference import ref_bn_lstm, ref_recurrent

CLASSES = {"LSTM": (L.LSTM, nn.LSTM), "GRU": (L.GRU, nn.GRU), "RNN": (L.RNN, nn.RNN)}
CELLS = {"LSTM": (L.LSTMCell, nn.LSTMCell), "GRU": (L.GRUCell, nn.GRUCell),
         "RNN": (L.RNNCell, nn.RNNCell)}
I, H = 5, 4


def _randomize(m):
    """Move gains and biases away from their initial 1 / 0 so that every parameter matters."""
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.startswith(("gain", "bias")):
                p.copy_(torch.rand_like(p) + 0.5 if name.startswith("gain") else
                        torch.randn_like(p) * 0.5)
    return m


def _paper_params(m, mode):
    """The module's parameters under the paper's names, per layer and direction (reference.py)."""
    names = {"weight_ih": "W_x", "weight_hh": "W_h", "bias_ih": "b_x", "bias_hh": "b_h",
             "gain_ih": "g_x", "gain_hh": "g_h", "gain_c": "g_c", "bias_c": "b_c", "gain": "g"}
    layers = []
    for l in range(m.num_layers):
        dirs = []
        for d in range(m.num_directions):
            sfx = f"_l{l}" + ("_reverse" if d else "")
            dirs.append({ref: getattr(m, ours + sfx) for ours, ref in names.items()
                         if hasattr(m, ours + sfx)})
        layers.append(dirs)
    return layers


def _sequences(lengths, dtype=torch.float64):
    return [torch.randn(n, I, dtype=dtype) * 2 + 0.3 for n in lengths]


def _final(mode, state):
    return (state,) if mode != "LSTM" else tuple(state)


# ------------------------------------------------------------------------------------------
# Against the naive reference (float64): outputs, final states, every parameter gradient
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode,norm,layers,bidir,batch_first,packed,nl", [
    ("LSTM", "layer", 2, True, False, True, "tanh"),
    ("LSTM", "layer", 1, False, True, False, "tanh"),
    ("LSTM", "none", 2, True, True, True, "tanh"),
    ("GRU", "layer", 2, True, True, True, "tanh"),
    ("GRU", "layer", 1, False, False, False, "tanh"),
    ("RNN", "layer", 2, True, False, True, "relu"),
    ("RNN", "layer", 1, False, True, False, "tanh"),
])
def test_matches_reference_forward_and_backward(mode, norm, layers, bidir, batch_first, packed,
                                                nl):
    kw = {"nonlinearity": nl} if mode == "RNN" else {}
    m = _randomize(CLASSES[mode][0](I, H, num_layers=layers, bidirectional=bidir,
                                    batch_first=batch_first, norm=norm, dtype=torch.float64, **kw))
    lengths = [4, 6, 3] if packed else [5, 5, 5]
    seqs = _sequences(lengths)
    D = 2 if bidir else 1
    h0 = torch.randn(layers * D, 3, H, dtype=torch.float64)
    c0 = torch.randn(layers * D, 3, H, dtype=torch.float64)
    hx = (h0, c0) if mode == "LSTM" else h0
    if packed:
        out, state = m(pack_sequence(seqs, enforce_sorted=False), hx)
        outs = [out_b[:n] for out_b, n in zip(
            torch.nn.utils.rnn.pad_packed_sequence(out, batch_first=True)[0], lengths)]
    else:
        x = torch.stack(seqs, 0 if batch_first else 1)
        out, state = m(x, hx)
        outs = list(out if batch_first else out.transpose(0, 1))
    finals = _final(mode, state)

    params = _paper_params(m, mode)
    ref_outs, ref_h, ref_c = [], [], []
    for b, seq in enumerate(seqs):
        o, h, c = ref_recurrent(mode, seq, params, h0[:, b], c0[:, b], nonlinearity=nl)
        ref_outs.append(o), ref_h.append(h), ref_c.append(c)
    ref_finals = (torch.stack(ref_h, 1),) + ((torch.stack(ref_c, 1),) if mode == "LSTM" else ())
    for o, r in zip(outs, ref_outs):
        torch.testing.assert_close(o, r, atol=1e-10, rtol=1e-8)
    for f, r in zip(finals, ref_finals):
        torch.testing.assert_close(f, r, atol=1e-10, rtol=1e-8)

    # Every parameter gradient of the same random projection of outputs and final states.
    weights = [torch.randn_like(o) for o in outs] + [torch.randn_like(f) for f in finals]
    ours = sum((w * o).sum() for w, o in zip(weights, outs + list(finals)))
    ref = sum((w * o).sum() for w, o in zip(weights, ref_outs + list(ref_finals)))
    names, ps = zip(*m.named_parameters())
    g_ours = torch.autograd.grad(ours, ps)
    g_ref = torch.autograd.grad(ref, ps)
    for name, a, b in zip(names, g_ours, g_ref):
        torch.testing.assert_close(a, b, atol=1e-9, rtol=1e-7, msg=name)
        assert a.abs().sum() > 0, f"{name} got a zero gradient"


def test_bn_lstm_matches_reference_with_active_only_statistics():
    """Per-step batch statistics over the examples still active: padding does not leak."""
    m = _randomize(L.LSTM(I, H, norm="batch", dtype=torch.float64))
    lengths = [6, 6, 3, 2]                       # at least 2 active examples at every step
    seqs = _sequences(lengths)
    out, (h, c) = m(pack_sequence(seqs))
    padded = pad_sequence(seqs)
    ref_out, ref_h, ref_c = ref_bn_lstm(padded, lengths, _paper_params(m, "LSTM")[0][0])
    out_pad = torch.nn.utils.rnn.pad_packed_sequence(out)[0]
    torch.testing.assert_close(out_pad, ref_out, atol=1e-10, rtol=1e-8)
    torch.testing.assert_close(h[0], ref_h, atol=1e-10, rtol=1e-8)
    torch.testing.assert_close(c[0], ref_c, atol=1e-10, rtol=1e-8)
    # Equal lengths, padded input (the statistics of all steps in one reduction).
    full = torch.randn(4, 3, I, dtype=torch.float64)
    out, (h, c) = m(full)
    ref_out, ref_h, ref_c = ref_bn_lstm(full, [4, 4, 4], _paper_params(m, "LSTM")[0][0])
    torch.testing.assert_close(out, ref_out, atol=1e-10, rtol=1e-8)
    torch.testing.assert_close(c[0], ref_c, atol=1e-10, rtol=1e-8)
    # The same batch padded with garbage and run as a full-length batch is different: the
    # statistics then include the padding, which the packed run excluded.
    garbage = padded + 10 * (torch.arange(6)[:, None, None] >= torch.tensor(lengths)[:, None])
    full, _ = m(garbage)
    assert not torch.allclose(full[:3, 2], out_pad[:3, 2])


def test_bn_lstm_running_statistics_per_time_step():
    m = L.LSTM(I, H, norm="batch", max_length=10)
    assert all(p.eq(0.1).all() for n, p in m.named_parameters() if n.startswith("gain"))
    x = torch.randn(3, 8, I) * 3 + 1
    m(x)
    assert m.num_batches_tracked.tolist() == [1, 1, 1] + [0] * 7
    # Running statistics differ between steps: they are kept per step.
    assert not torch.allclose(m.running_mean_hh_l0[0], m.running_mean_hh_l0[1])
    m.eval()
    y = torch.randn(5, 2, I)
    before, _ = m(y)
    # Steps 3, 4 are beyond the trained length 3: they use step 2's statistics, so the untrained
    # slots 3.. do not matter ...
    with torch.no_grad():
        for name, buf in m.named_buffers():
            if name.startswith("running"):
                buf[3:] = 123.0
    after, _ = m(y)
    torch.testing.assert_close(after, before)
    # ... while step 2's do, for steps 2, 3 and 4 only.
    with torch.no_grad():
        m.running_mean_ih_l0[2] += 1.0
    changed, _ = m(y)
    torch.testing.assert_close(changed[:2], before[:2])
    assert not torch.allclose(changed[2:], before[2:])
    # Eval output of an example does not depend on the batch (running statistics).
    alone, _ = m(y[:, :1])
    torch.testing.assert_close(alone[:, 0], changed[:, 0])
    # Packed (step by step) and padded (all steps at once) read the same statistics.
    packed, _ = m(pack_sequence(list(y.transpose(0, 1))))
    torch.testing.assert_close(nn.utils.rnn.pad_packed_sequence(packed)[0], changed)
    # Training, too: equal-length packed and padded batches give the same outputs and updates.
    m.train()
    twin = L.LSTM(I, H, norm="batch", max_length=10)
    twin.load_state_dict(m.state_dict())
    torch.testing.assert_close(nn.utils.rnn.pad_packed_sequence(
        twin(pack_sequence(list(y.transpose(0, 1))))[0])[0], m(y)[0])
    for (name, a), b in zip(m.named_buffers(), twin.buffers()):
        torch.testing.assert_close(a, b, msg=name)


def test_bn_lstm_training_needs_two_examples():
    with pytest.raises(ValueError, match="more than one value per channel"):
        L.LSTM(I, H, norm="batch")(torch.randn(3, 1, I))


# ------------------------------------------------------------------------------------------
# norm="none" is torch's module
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["LSTM", "GRU", "RNN"])
def test_none_equals_torch_with_copied_weights(mode):
    ours_cls, torch_cls = CLASSES[mode]
    theirs = torch_cls(I, H, num_layers=2, bidirectional=True, batch_first=True)
    ours = ours_cls.from_torch(theirs, norm="none")
    assert list(ours.state_dict()) == list(theirs.state_dict())
    ln = ours_cls.from_torch(theirs, norm="layer", gain_init=0.5)
    for name, p in theirs.named_parameters():
        assert torch.equal(getattr(ln, name), p), name
    assert all(p.eq(0.5).all() for n, p in ln.named_parameters() if n.startswith("gain"))
    for inp in (torch.randn(3, 6, I), pack_sequence(_sequences([3, 6, 1], torch.float32),
                                                    enforce_sorted=False)):
        a, sa = ours(inp)
        b, sb = theirs(inp)
        a, b = (a.data, b.data) if isinstance(inp, nn.utils.rnn.PackedSequence) else (a, b)
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
        for x, y in zip(_final(mode, sa), _final(mode, sb)):
            torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-5)
        ga = torch.autograd.grad(a.square().sum(), list(ours.parameters()))
        gb = torch.autograd.grad(b.square().sum(), list(theirs.parameters()))
        for x, y in zip(ga, gb):
            torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("mode", ["LSTM", "GRU", "RNN"])
def test_cells_none_equal_torch_and_match_one_step_of_the_stack(mode):
    ours_cls, torch_cls = CELLS[mode]
    theirs = torch_cls(I, H)
    ours = ours_cls.from_torch(theirs, norm="none")
    x, h = torch.randn(3, I), torch.randn(3, H)
    hx = (h, torch.randn(3, H)) if mode == "LSTM" else h
    for a, b in zip(_final(mode, ours(x, hx)), _final(mode, theirs(x, hx))):
        torch.testing.assert_close(a, b)
    # An LN cell computes one step of the LN stack with the same parameters.
    cell = _randomize(ours_cls(I, H, norm="layer"))
    stack = CLASSES[mode][0](I, H, norm="layer")
    with torch.no_grad():
        for name, p in cell.named_parameters():
            getattr(stack, name + "_l0").copy_(p)
    hx_stack = tuple(s.unsqueeze(0) for s in _final(mode, hx))
    out, state = stack(x.unsqueeze(0), hx_stack if mode == "LSTM" else hx_stack[0])
    for a, b in zip(_final(mode, cell(x, hx)), _final(mode, state)):
        torch.testing.assert_close(a, b[0])
    # Unbatched (I,) input, as torch's cells accept.
    one = _final(mode, cell(x[0], tuple(s[0] for s in _final(mode, hx)) if mode == "LSTM"
                             else hx[0]))
    torch.testing.assert_close(one[0], _final(mode, cell(x, hx))[0][0])


# ------------------------------------------------------------------------------------------
# The paper's claims as properties
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_ln_output_invariant_to_rescaling_one_input_sequence(mode):
    # Exact with eps -> 0 (paper section 5.1, Table 1; docs/paper.md section 3), approximate with
    # the default eps.
    x = torch.randn(6, 3, I, dtype=torch.float64)
    scaled = x.clone()
    scaled[:, 1] *= 7.5
    for eps, tol in ((1e-14, 1e-9), (1e-5, 1e-3)):
        m = _randomize(CLASSES[mode][0](I, H, num_layers=2, norm="layer", eps=eps,
                                        dtype=torch.float64))
        torch.testing.assert_close(m(scaled)[0], m(x)[0], atol=tol, rtol=tol)
    # Without normalization the output changes.
    plain = CLASSES[mode][0](I, H, num_layers=2, norm="none", dtype=torch.float64)
    assert not torch.allclose(plain(scaled)[0][:, 1], plain(x)[0][:, 1], atol=1e-3)


def test_ln_output_independent_of_batch_bn_output_is_not():
    x = torch.randn(5, 4, I)
    ln = _randomize(L.LSTM(I, H, norm="layer"))
    torch.testing.assert_close(ln(x)[0][:, :2], ln(x[:, :2])[0])
    bn = _randomize(L.LSTM(I, H, norm="batch"))
    assert not torch.allclose(bn(x)[0][:, :2], bn(x[:, :2])[0], atol=1e-4)


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_packed_example_equals_running_it_alone(mode):
    m = _randomize(CLASSES[mode][0](I, H, num_layers=2, bidirectional=True, norm="layer"))
    seqs = _sequences([2, 7, 4], torch.float32)
    out, state = m(pack_sequence(seqs, enforce_sorted=False))
    padded, lengths = nn.utils.rnn.pad_packed_sequence(out, batch_first=True)
    assert lengths.tolist() == [2, 7, 4]
    for b, seq in enumerate(seqs):
        alone, alone_state = m(seq.unsqueeze(1))
        torch.testing.assert_close(padded[b, :len(seq)], alone[:, 0])
        assert padded[b, len(seq):].abs().sum() == 0
        for s, a in zip(_final(mode, state), _final(mode, alone_state)):
            torch.testing.assert_close(s[:, b], a[:, 0])


def test_dropout_between_layers_only_in_training():
    m = _randomize(L.LSTM(I, H, num_layers=2, dropout=1.0, norm="layer"))
    x = torch.randn(4, 3, I)
    out, _ = m(x)
    # p = 1 zeroes the first layer's output: layer 2 then sees zeros; its own output is not
    # dropped.
    second = L.LSTM(I, H, norm="layer")
    with torch.no_grad():
        second.weight_ih_l0.zero_()              # equivalent to a zero input
        for name, p in second.named_parameters():
            if name != "weight_ih_l0":
                p.copy_(getattr(m, name.replace("_l0", "_l1")))
    torch.testing.assert_close(out, second(x)[0])
    assert out.abs().sum() > 0
    m.eval()
    nodrop = L.LSTM(I, H, num_layers=2, norm="layer")
    nodrop.load_state_dict(m.state_dict())
    torch.testing.assert_close(m(x)[0], nodrop(x)[0])
    with pytest.warns(UserWarning, match="num_layers greater than 1"):
        L.LSTM(I, H, dropout=0.5)


def test_gain_init_and_layer_parameters():
    m = L.LSTM(I, H, gain_init=0.1)
    shapes = {n: tuple(p.shape) for n, p in m.named_parameters()}
    assert shapes == {"weight_ih_l0": (4 * H, I), "weight_hh_l0": (4 * H, H),
                      "bias_ih_l0": (4 * H,), "bias_hh_l0": (4 * H,), "gain_ih_l0": (4 * H,),
                      "gain_hh_l0": (4 * H,), "gain_c_l0": (H,), "bias_c_l0": (H,)}
    assert m.gain_ih_l0.eq(0.1).all() and m.bias_ih_l0.eq(0).all()
    assert L.LSTM(I, H).gain_c_l0.eq(1).all()
    assert "gain_l0" in dict(L.RNN(I, H).named_parameters())
    assert "bias_c_l0" not in dict(L.LSTM(I, H, bias=False).named_parameters())


# ------------------------------------------------------------------------------------------
# Gradients
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode,norm", [("LSTM", "layer"), ("GRU", "layer"), ("RNN", "layer"),
                                       ("LSTM", "batch")])
def test_gradcheck_float64_inputs_and_parameters(mode, norm):
    m = _randomize(CLASSES[mode][0](2, 3, bidirectional=True, norm=norm, dtype=torch.float64))
    seqs = [torch.randn(n, 2, dtype=torch.float64, requires_grad=True) for n in (3, 3, 2)]
    names, params = zip(*((n, p.detach().clone().requires_grad_()) for n, p in
                          m.named_parameters()))

    def f(*inputs):
        ps = dict(zip(names, inputs[3:]))
        out, state = torch.func.functional_call(m, ps, (pack_sequence(list(inputs[:3])),))
        return (out.data,) + _final(mode, state)

    assert torch.autograd.gradcheck(f, tuple(seqs) + params, eps=1e-6, atol=1e-5,
                                    fast_mode=True)
    grads = torch.autograd.grad(f(*seqs, *params)[0].square().sum(), params)
    for name, g in zip(names, grads):
        assert torch.isfinite(g).all() and g.abs().sum() > 0, name


# ------------------------------------------------------------------------------------------
# Bad input
# ------------------------------------------------------------------------------------------

def test_bad_input_errors_name_expected_and_received():
    m = L.LSTM(I, H, num_layers=2)
    with pytest.raises(ValueError, match=r"input_size=5.*received shape \(3, 2, 7\)"):
        m(torch.randn(3, 2, 7))
    with pytest.raises(RuntimeError, match=r"3-D input.*received a 4-D tensor"):
        m(torch.randn(3, 2, 1, I))
    with pytest.raises(RuntimeError, match=r"expected hx\[0\] of shape \(2, 2, 4\).*received "
                                           r"\(1, 2, 4\)"):
        m(torch.randn(3, 2, I), (torch.zeros(1, 2, H), torch.zeros(1, 2, H)))
    with pytest.raises(ValueError, match=r"expected hx of shape \(1, 2, 4\).*received \(1, 3, 4\)"):
        L.GRU(I, H)(torch.randn(3, 2, I), torch.zeros(1, 3, H))
    with pytest.raises(ValueError, match=r"unknown norm 'group'; expected one of"):
        L.GRU(I, H, norm="group")
    with pytest.raises(ValueError, match=r"unknown norm 'rms'"):
        L.LSTMCell(I, H, norm="rms")
    with pytest.raises(ValueError, match=r"LSTMCell expected an input of shape \(B, 5\)"):
        L.LSTMCell(I, H)(torch.randn(2, 3))
    with pytest.raises(TypeError, match="floating-point"):
        m(torch.ones(3, 2, I, dtype=torch.long))
    with pytest.raises(ValueError, match="proj_size argument is only supported for LSTM"):
        L.GRU(I, H, proj_size=2)
    with pytest.raises(TypeError, match=r"expected a torch.nn.GRU, received LSTM"):
        L.GRU.from_torch(nn.LSTM(I, H))


# ------------------------------------------------------------------------------------------
# Devices and compilation
# ------------------------------------------------------------------------------------------

@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("norm", ["layer", "batch", "none"])
def test_cuda_matches_cpu(norm):
    m = _randomize(L.LSTM(I, H, num_layers=2, bidirectional=True, norm=norm))
    x = pack_sequence(_sequences([5, 3, 2], torch.float32), enforce_sorted=False)
    out, (h, c) = m(x)
    out_gpu, (h_gpu, c_gpu) = m.cuda()(x.to("cuda"))
    torch.testing.assert_close(out_gpu.data.cpu(), out.data, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(h_gpu.cpu(), h, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_torch_compile_matches_eager():
    m = _randomize(L.LSTM(I, H, norm="layer"))
    x = torch.randn(2, 2, I)
    compiled = torch.compile(m, backend="aot_eager")
    out, (h, c) = compiled(x)
    torch.testing.assert_close(out, m(x)[0])
    (g,) = torch.autograd.grad(out.sum(), [m.gain_hh_l0])
    assert torch.isfinite(g).all() and g.abs().sum() > 0


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_fused_path_matches_the_loop(mode):
    m = _randomize(CLASSES[mode][0](I, H, num_layers=2, bidirectional=True, dtype=torch.float64))
    x = pack_sequence(_sequences([3, 6, 2]), enforce_sorted=False)
    results = []
    for use_fused in (True, False):
        m.use_fused = use_fused
        out, state = m(x)
        outputs = [out.data, *_final(mode, state)]
        results.append(outputs + list(torch.autograd.grad(sum(o.sum() for o in outputs),
                                                           list(m.parameters()))))
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-8)


@pytest.mark.parametrize("mode", ["GRU", "RNN"])
def test_batch_norm_gru_and_rnn_train_and_eval(mode):
    m = _randomize(CLASSES[mode][0](I, H, norm="batch", max_length=4))
    x = pack_sequence(_sequences([5, 4, 4], torch.float32))
    out, _ = m(x)
    assert torch.isfinite(out.data).all()
    # Step 4 has one active example: no update there (and beyond max_length anyway).
    assert m.num_batches_tracked.tolist() == [1, 1, 1, 1]
    # The examples of a batch interact in training, not in eval.
    y = torch.randn(3, 4, I)
    assert not torch.allclose(m(y)[0][:, :2], m(y[:, :2])[0], atol=1e-4)
    m.eval()
    torch.testing.assert_close(m(y)[0][:, :2], m(y[:, :2])[0])


def test_bn_lstm_cell_uses_the_statistics_of_its_time_step():
    cell = L.LSTMCell(I, H, norm="batch", max_length=3)
    x = torch.randn(4, I) * 2 + 1
    h, c = cell(x, time_step=1)
    assert cell.num_batches_tracked.tolist() == [0, 1, 0]
    assert cell.running_mean_ih[0].eq(0).all() and not cell.running_mean_ih[1].eq(0).all()
    cell.eval()
    assert not torch.allclose(cell(x, time_step=0)[0], cell(x, time_step=1)[0])
    torch.testing.assert_close(cell(x, time_step=1)[0], cell(x, time_step=5)[0])
    with pytest.raises(ValueError, match="more than one value per channel"):
        cell.train()(x[:1], time_step=2)


def test_bfloat16_close_to_float32():
    m = _randomize(L.LSTM(I, H, num_layers=2, norm="layer"))
    x = torch.randn(4, 3, I)
    out32, _ = m(x)
    out16, _ = m.to(torch.bfloat16)(x.bfloat16())
    assert out16.dtype == torch.bfloat16
    torch.testing.assert_close(out16.float(), out32, atol=5e-2, rtol=5e-2)


def test_bn_lstm_eval_with_exact_population_statistics_equals_training_output():
    """With momentum 1 the running statistics are one batch's; on that (large) batch the eval
    output then equals the training output up to the n/(n-1) variance factor. A gap between
    training and evaluation (e.g. the adding problem in the reproduction) therefore comes from
    the moving averages lagging the parameters, not from how eval applies them."""
    m = L.LSTM(I, H, norm="batch", max_length=6, momentum=1.0)
    x = torch.randn(6, 4000, I) * 2 + 0.5
    with torch.no_grad():
        train_out, _ = m(x)
        m.eval()
        eval_out, _ = m(x)
    torch.testing.assert_close(eval_out, train_out, atol=1e-3, rtol=0)


@pytest.mark.parametrize("mode,norm", [("LSTM", "layer"), ("GRU", "layer"), ("RNN", "layer"),
                                       ("LSTM", "batch")])
def test_autocast_readable_loop_follows_the_fused_dtype_rule(mode, norm):
    """Under CPU autocast both paths return the output and states in the dtype torch's module
    returns (the autocast dtype; float32 for the GRU, which torch does not cast on the CPU),
    and agree within the autocast dtype's tolerance."""
    m = _randomize(CLASSES[mode][0](I, H, num_layers=2, bidirectional=True, norm=norm))
    x = torch.randn(6, 3, I)
    results = []
    for fused in (True, False):
        m.use_fused = fused
        with torch.autocast("cpu", torch.bfloat16):
            out, h_n = m(x)
        results.append((out, *_final(mode, h_n)))
    # BN over a batch of 3 divides by a 3-value spread, which amplifies the bf16 rounding of the
    # summed inputs (the fused path's input GEMM rounds once from float32, the loop's runs in bf16)
    atol = 0.15 if norm == "batch" else 6e-2
    for a, b in zip(*results):
        assert a.dtype == b.dtype == (torch.float32 if mode == "GRU" else torch.bfloat16)
        torch.testing.assert_close(a.float(), b.float(), atol=atol, rtol=5e-2)


@pytest.mark.parametrize("mode", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("packed", [False, True])
def test_batch_norm_terms_through_torchs_kernel_equal_the_readable_terms(mode, packed):
    """BN's per-step statistics through F.batch_norm (one kernel) give the readable path's
    outputs, gradients and running statistics (max_length below T: later steps keep none and
    evaluate with the last trained step's)."""
    from layernorm.rnn import terms
    m = _randomize(CLASSES[mode][0](I, H, num_layers=2, norm="batch", max_length=4,
                                    dtype=torch.float64))
    seqs = _sequences([6, 6, 5, 3])
    x = pack_sequence(seqs) if packed else pad_sequence(seqs)
    twin = CLASSES[mode][0](I, H, num_layers=2, norm="batch", max_length=4, dtype=torch.float64)
    twin.load_state_dict(m.state_dict())
    twin.use_fused = False
    calls = []
    real = torch.nn.functional.batch_norm
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(terms.F, "batch_norm", lambda *a, **k: calls.append(1) or real(*a, **k))
        results = [net(x) for net in (m, twin)]
        n_fused = len(calls)
        grads = [torch.autograd.grad((out.data if packed else out).square().sum(),
                                     list(net.parameters())) for (out, _), net in
                 zip(results, (m, twin))]
        assert len(calls) == n_fused                        # none from the readable twin
        m.eval(), twin.eval()
        evals = [net(x)[0] for net in (m, twin)]
    assert n_fused > 0
    (a, ha), (b, hb) = results
    torch.testing.assert_close(a.data if packed else a, b.data if packed else b)
    for p, q in zip(_final(mode, ha), _final(mode, hb)):
        torch.testing.assert_close(p, q)
    for p, q in zip(*grads):
        torch.testing.assert_close(p, q)
    for (name, p), q in zip(m.named_buffers(), twin.buffers()):
        torch.testing.assert_close(p, q, msg=name)
    torch.testing.assert_close(evals[0].data if packed else evals[0],
                               evals[1].data if packed else evals[1])


@pytest.mark.parametrize("cls", [L.LSTM, L.GRU])
def test_second_order_through_a_state_from_an_earlier_call(cls):
    """create_graph=True where h0 was computed by an earlier call of the same module (truncated
    BPTT, a decoder fed its state): the fused path's differentiable backward takes the partial
    derivatives of this call only, so first and second derivatives equal the readable loop's."""
    torch.manual_seed(0)
    m = cls(3, 4)
    x1, x2 = torch.randn(5, 2, 3), torch.randn(5, 2, 3)

    def derivatives():
        params = list(m.parameters())
        _, state = m(x1)
        out, _ = m(x2, state)
        first = torch.autograd.grad((out ** 2).sum(), params, create_graph=True)
        second = torch.autograd.grad(sum((g ** 2).sum() for g in first), params)
        return [g.detach() for g in first], second
    fast = derivatives()
    m.use_fused = False
    loop = derivatives()
    for got, want in zip(fast, loop):
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, atol=1e-4 * b.abs().max().item() + 1e-5, rtol=1e-4)

"""The reproduction's plain-LSTM arm (``rnn_classifier`` with norm="none") is torch.nn.LSTM's model:
``layernorm.LSTM(norm="none")`` seeded the same way starts from the same weights (same names,
shapes, draws), leaves the generator where torch's module leaves it, and computes torch's outputs
and gradients (padded: torch's op; packed variable lengths: the C loop, to float32 rounding)."""
import torch
from torch import nn

import layernorm
from layernorm_paper.data import Dataset
from layernorm_paper.models.classifiers import rnn_classifier


def _tokens(seed=0, n=6, t=9, vocab=40):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(1, vocab, (n, t), generator=g)
    lengths = torch.tensor([9, 3, 7, 1, 5, 9])[:n]
    for i, k in enumerate(lengths):
        x[i, k:] = 0
    y = torch.randint(0, 2, (n,), generator=g)
    return Dataset(name="t", task="classify", x_train=x, y_train=y, x_test=x, y_test=y,
                   num_classes=2, vocab_size=vocab, lengths_train=lengths, lengths_test=lengths)


def test_plain_arm_starts_from_torch_lstm_weights_and_draws():
    ds = _tokens()
    torch.manual_seed(11)
    ours = rnn_classifier(ds, "none", hidden=8, embed=5)
    after_ours = torch.rand(3)
    assert isinstance(ours.lstm, layernorm.LSTM) and ours.lstm.norm == "none"
    # the former arm, constructed in the same order from the same seed: embedding, torch's
    # LSTM, head
    torch.manual_seed(11)
    embed = nn.Embedding(40, 5)
    lstm = nn.LSTM(5, 8, batch_first=True)
    head = nn.Linear(8, 2)
    after_torch = torch.rand(3)
    assert torch.equal(after_ours, after_torch)       # the same number of draws
    want = {**{f"embed.{k}": v for k, v in embed.state_dict().items()},
            **{f"lstm.{k}": v for k, v in lstm.state_dict().items()},
            **{f"head.{k}": v for k, v in head.state_dict().items()}}
    got = ours.state_dict()
    assert list(got) == list(want)                    # names (and order) a checkpoint reads
    for k in want:
        assert got[k].shape == want[k].shape and torch.equal(got[k], want[k]), k


def test_plain_arm_computes_torch_lstm_padded_and_packed():
    ds = _tokens(seed=1)
    torch.manual_seed(3)
    ours = rnn_classifier(ds, "none", hidden=8, embed=5)
    ref = rnn_classifier(ds, "none", hidden=8, embed=5)
    ref.lstm = nn.LSTM(5, 8, batch_first=True)
    ref.load_state_dict(ours.state_dict())            # a checkpoint of either loads in the other
    x, lengths = ds.x_train, ds.lengths_train
    # padded (no lengths): torch's op, the same numbers
    assert torch.equal(ours(x), ref(x))
    # packed variable lengths: the C loop without normalization where it runs, float32 rounding
    out_ours, out_ref = ours(x, lengths=lengths), ref(x, lengths=lengths)
    torch.testing.assert_close(out_ours, out_ref, rtol=1e-5, atol=1e-6)
    out_ours.square().sum().backward()
    out_ref.square().sum().backward()
    grads = dict(ref.named_parameters())
    for name, p in ours.named_parameters():
        torch.testing.assert_close(p.grad, grads[name].grad, rtol=1e-4, atol=1e-6, msg=name)

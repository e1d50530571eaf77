"""``layernorm.recompute_batch_stats``: population statistics of batch norm from one pass."""
import pytest
import torch
from torch import nn

import layernorm
from layernorm_paper.data import load_dataset
from layernorm_paper.models.classifiers import rnn_classifier


def _ff_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 7), nn.BatchNorm1d(7), nn.ReLU(), nn.Linear(7, 6),
                         layernorm.BatchNorm(6, unbiased=True), nn.Tanh(), nn.Linear(6, 3))


def test_feedforward_stats_equal_the_exact_dataset_mean_and_var():
    model = _ff_model()
    model.train()
    torch.manual_seed(1)
    x = torch.randn(40, 5) * 3 + 1
    for _ in range(3):                      # some EMA history to be replaced
        model(x[:10])
    before = {k: v.clone() for k, v in model.state_dict().items()}
    # unequal batches: equal weight per *value*, not per batch
    batches = [(x[:7], None), (x[7:20], None), (x[20:], None)]
    assert layernorm.recompute_batch_stats(model, batches) == 2
    a = model[0](x)
    assert torch.allclose(model[1].running_mean, a.mean(0), atol=1e-6)
    assert torch.allclose(model[1].running_var, a.var(0, unbiased=True), atol=1e-5)
    # the second BN sees layer 1 normalized with batch statistics, as in training
    z = torch.cat([model[3](model[2](nn.functional.batch_norm(
        model[0](b), None, None, model[1].weight, model[1].bias, training=True)))
        for b, _ in batches])
    assert torch.allclose(model[4].running_mean, z.mean(0), atol=1e-5)
    assert torch.allclose(model[4].running_var, z.var(0, unbiased=True), atol=1e-5)
    # everything else untouched, mode restored
    after = model.state_dict()
    for k, v in before.items():
        if "running_" not in k:
            assert torch.equal(after[k], v), k
    assert model.training and all(m.training for m in model.modules())


def test_conv_stats_per_channel_and_eval_mode_restored():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                          nn.Conv2d(4, 3, 3), layernorm.BatchNorm(3)).eval()
    x = torch.randn(12, 2, 6, 6)
    with torch.no_grad():                   # works under the caller's no_grad too
        layernorm.recompute_batch_stats(model, [x[:5], x[5:]])
    a = model[0](x)
    assert torch.allclose(model[1].running_mean, a.mean((0, 2, 3)), atol=1e-6)
    assert torch.allclose(model[1].running_var, a.var((0, 2, 3), unbiased=True), atol=1e-5)
    assert not any(m.training for m in model.modules())
    assert int(model[1].num_batches_tracked) == 0


def test_no_batch_norm_returns_zero_and_bad_input_raises():
    mlp = nn.Sequential(nn.Linear(3, 4), layernorm.LayerNorm(4))
    assert layernorm.recompute_batch_stats(mlp, [torch.randn(4, 3)]) == 0
    with pytest.raises(ValueError, match="no batches"):
        layernorm.recompute_batch_stats(_ff_model(), [])
    with pytest.raises(TypeError, match="torch.nn.Module"):
        layernorm.recompute_batch_stats(lambda x: x, [torch.randn(2, 3)])
    with pytest.raises(ValueError, match="num_batches"):
        layernorm.recompute_batch_stats(_ff_model(), [torch.randn(4, 5)], num_batches=0)


def test_bn_lstm_per_step_stats_exact_and_padding_excluded():
    torch.manual_seed(0)
    lstm = layernorm.LSTM(3, 4, norm="batch", max_length=6)
    x = torch.randn(5, 8, 3)                # (T, B, I): every example active at every step
    layernorm.recompute_batch_stats(lstm, [x[:, :3], x[:, 3:]])
    a = nn.functional.linear(x, lstm.weight_ih_l0)          # the input term, (T, B, 4H)
    assert torch.allclose(lstm.running_mean_ih_l0[:5], a.mean(1), atol=1e-6)
    assert torch.allclose(lstm.running_var_ih_l0[:5], a.var(1, unbiased=True), atol=1e-5)
    assert lstm.num_batches_tracked[:5].tolist() == [1] * 5   # a fresh model: steps now trained
    assert lstm.num_batches_tracked[5] == 0
    # variable lengths: a step's statistics come from the examples still active there
    lengths = torch.tensor([5, 5, 3, 2, 2, 1, 1, 1])
    packed = nn.utils.rnn.pack_padded_sequence(x, lengths, enforce_sorted=False)
    layernorm.recompute_batch_stats(lstm, [packed])
    active = a[3, lengths > 3]
    assert torch.allclose(lstm.running_mean_ih_l0[3], active.mean(0), atol=1e-6)


def test_bn_lstm_on_adding_scored_with_population_stats_matches_train_mode():
    """A BN-LSTM scored with its exponential running averages can be far off on the adding
    problem; with population statistics it is within a factor 2 of its train-mode MSE."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)    # tiny matrices: one thread is fastest, and immune to a busy machine
    try:
        _train_and_score_bn_lstm_on_adding()
    finally:
        torch.set_num_threads(threads)


def _train_and_score_bn_lstm_on_adding():
    ds = load_dataset("adding", length=20, n_train=1024, n_test=256)
    torch.manual_seed(0)
    model = rnn_classifier(ds, "batch", hidden=16, embed=16)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(0)
    for _ in range(120):
        idx = torch.randint(0, len(ds.x_train), (32,), generator=gen)
        loss = nn.functional.mse_loss(model(ds.x_train[idx]), ds.y_train[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()

    def mse(mode):
        model.train(mode == "train")
        with torch.no_grad():
            # train mode: batch statistics over batches of 32, as during training
            preds = torch.cat([model(ds.x_test[i:i + 32]) for i in range(0, 256, 32)])
        return float(nn.functional.mse_loss(preds, ds.y_test))

    train_mode = mse("train")
    ema = mse("eval")
    layernorm.recompute_batch_stats(model, [ds.x_train[i:i + 32] for i in range(0, 1024, 32)])
    population = mse("eval")
    assert train_mode < 0.1, train_mode     # it learned something (predicting 1.0 gives ~0.17)
    print(f"adding MSE: train mode {train_mode:.4f}, EMA {ema:.4f}, population {population:.4f}")
    assert population < 2 * train_mode, (population, train_mode, ema)
    assert not model.training

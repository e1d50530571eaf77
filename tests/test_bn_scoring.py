"""How batch norm is scored: the batch-mean estimator of ``recompute_batch_stats`` (the limit of
the running averages at fixed weights), the BN-LSTM's ``batchmean_*`` scores, and the report's
sentence on the gap between BN's two scores (docs/report.md, "Scoring a run")."""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_sequence

import layernorm
from layernorm_paper.data import load_dataset
from layernorm_paper.models.classifiers import rnn_classifier

from .test_report import bullet


def _ff(momentum):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 7), nn.BatchNorm1d(7, momentum=momentum), nn.ReLU(),
                         nn.Linear(7, 3), nn.BatchNorm1d(3, momentum=momentum))


def test_batch_mean_estimator_is_torchs_cumulative_average_of_the_batch_statistics():
    torch.manual_seed(1)
    x = torch.randn(40, 5) * 2 + 1
    batches = [x[:4], x[4:20], x[20:]]                 # unequal: per batch, not per value
    cumulative = _ff(None).train()                     # torch: momentum=None, equal weights
    with torch.no_grad():
        for b in batches:
            cumulative(b)
    model = _ff(0.1)
    assert layernorm.recompute_batch_stats(model, batches, estimator="batch_mean") == 2
    pooled = _ff(0.1)
    layernorm.recompute_batch_stats(pooled, batches)
    for i in (1, 4):
        torch.testing.assert_close(model[i].running_mean, cumulative[i].running_mean)
        torch.testing.assert_close(model[i].running_var, cumulative[i].running_var)
        # ... which is not the pooled estimate (unequal batches, the batches' means differ)
        assert not torch.allclose(model[i].running_var, pooled[i].running_var, rtol=1e-3)
    with pytest.raises(ValueError, match="estimator"):
        layernorm.recompute_batch_stats(model, batches, estimator="ema")


@pytest.mark.parametrize("fused", [True, False])
def test_batch_mean_estimator_of_a_bn_lstm_per_step_on_both_paths(fused):
    torch.manual_seed(0)
    lstm = layernorm.LSTM(3, 4, norm="batch", max_length=6)
    lstm.use_fused = fused
    x = torch.randn(5, 8, 3)
    parts = [x[:, :3], x[:, 3:]]
    layernorm.recompute_batch_stats(lstm, parts, estimator="batch_mean")
    a = [nn.functional.linear(p, lstm.weight_ih_l0) for p in parts]    # input term (T, B, 4H)
    torch.testing.assert_close(lstm.running_mean_ih_l0[:5], (a[0].mean(1) + a[1].mean(1)) / 2)
    torch.testing.assert_close(lstm.running_var_ih_l0[:5], (a[0].var(1) + a[1].var(1)) / 2)
    # a step where a batch has one active example: that batch has no statistics there
    packed = [pack_sequence([torch.randn(n, 3) for n in lengths])
              for lengths in ((4, 4, 2), (4, 1))]
    fresh = layernorm.LSTM(3, 4, norm="batch", max_length=6)
    fresh.load_state_dict(lstm.state_dict())
    fresh.use_fused = fused
    layernorm.recompute_batch_stats(fresh, packed, estimator="batch_mean")
    first = nn.utils.rnn.pad_packed_sequence(packed[0], batch_first=True)[0]
    a3 = nn.functional.linear(first[:2, 3], fresh.weight_ih_l0)       # step 3: batch 1 only
    torch.testing.assert_close(fresh.running_mean_ih_l0[3], a3.mean(0))
    torch.testing.assert_close(fresh.running_var_ih_l0[3], a3.var(0))


def test_both_paths_give_the_same_population_and_batch_mean_statistics():
    torch.manual_seed(2)
    base = layernorm.LSTM(3, 5, norm="batch", max_length=7)
    batches = [torch.randn(7, 6, 3) for _ in range(3)]
    found = {}
    for fused in (True, False):
        for est in ("pooled", "batch_mean"):
            m = copy.deepcopy(base)
            m.use_fused = fused
            layernorm.recompute_batch_stats(m, batches, estimator=est)
            found[fused, est] = {k: v for k, v in m.state_dict().items() if "running" in k}
    for est in ("pooled", "batch_mean"):
        for k, v in found[True, est].items():
            torch.testing.assert_close(v, found[False, est][k], msg=k)
    # the hidden and cell terms downstream of batch-normalized steps: the two estimators differ
    assert not torch.allclose(found[True, "pooled"]["running_var_hh_l0"][1:],
                              found[True, "batch_mean"]["running_var_hh_l0"][1:], rtol=1e-3)


def test_bn_lstm_scores_carry_the_batch_mean_score_at_the_training_batch_size():
    ds = load_dataset("adding", length=6, n_train=64, n_test=16)
    torch.manual_seed(0)
    model = rnn_classifier(ds, "batch", hidden=4, embed=4)
    before = model.eval().scores()
    assert "batchmean_test_error" not in before          # no training forward seen yet
    model.train()
    model(ds.x_train[:8])
    state = {k: v.clone() for k, v in model.state_dict().items()}
    out = model.eval().scores()
    assert out["batchmean_batch"] == 8
    assert 0 <= out["batchmean_test_error"] <= 1 and out["batchmean_test_loss"] >= 0
    assert out["batchmean_test_loss"] != out["eval_test_loss"]
    for k, v in model.state_dict().items():               # the running averages put back
        assert torch.equal(v, state[k]), k
    layer = rnn_classifier(ds, "layer", hidden=4, embed=4)
    layer.train()
    layer(ds.x_train[:8])
    assert not any(k.startswith("batchmean") for k in layer.eval().scores())


# --- the report's sentence on BN-LSTM's two scores ----------------------------------------------

def _write(root, name, config, rows):
    import json
    d = root / "runs" / name
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps(config))
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "done").write_text("")


def _bn_lstm_runs(root, batchmean: bool):
    """rnn_norms on MNIST-1D, 5 seeds: LSTM, LN-LSTM and a BN-LSTM whose running-average score
    (the runner's test_error) is worse than its population score, with a batch-mean score
    between them when ``batchmean``. Returns the BN rows per seed."""
    curves = {"layer": [0.5, 0.2, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1],
              "none": [0.8, 0.7, 0.6, 0.3, 0.3, 0.3, 0.3, 0.3],
              "batch": [0.8, 0.5, 0.3, 0.2, 0.2, 0.2, 0.2, 0.2]}
    bn_rows = {}
    for norm, errs in curves.items():
        for seed in range(5):
            rows = []
            for i, e in enumerate(errs):
                e = e + 0.002 * seed
                row = {"step": 50 * (i + 1), "epoch": 1, "train_loss": 2 * e, "test_loss": 2 * e,
                       "test_error": e, "wall_time": float(i)}
                if norm == "batch":      # EMA worse by 10-14 pp, wobbling between evaluations
                    ema = e + 0.10 + 0.01 * seed + (0.03 if i % 2 else 0.0)
                    row |= {"test_error": ema, "eval_test_error": e, "eval_test_loss": 2 * e,
                            "bn_scoring": "population"}
                    if batchmean:
                        row |= {"batchmean_test_error": e + 0.04, "batchmean_test_loss": 2 * e,
                                "batchmean_batch": 32}
                rows.append(row)
            cfg = {"experiment": "rnn_norms", "task": "mnist1d-seq", "dataset": "mnist1d-seq",
                   "norm": norm, "batch_size": 32, "seed": seed, "steps": 400,
                   "model": "rnn_classifier", "model_args": {"hidden": 48}, "data_args": {}}
            _write(root, f"rnn_norms/mnist1d-{norm}-{seed}", cfg, rows)
            if norm == "batch":
                bn_rows[seed] = rows
    return bn_rows


def _last3(rows, key):
    return sum(r[key] for r in rows[-3:]) / 3


@pytest.mark.parametrize("batchmean", [True, False])
def test_report_states_the_bn_lstm_score_gap_and_its_split(tmp_path, monkeypatch, batchmean):
    import layernorm_paper.report.figures as figures
    from layernorm_paper import report as R
    monkeypatch.setattr(figures, "draw", lambda fig, inp, path: None)
    bn = _bn_lstm_runs(tmp_path, batchmean)
    R.build_report(tmp_path)
    md = (tmp_path / "report.md").read_text()
    start = md.index('<a id="rnn-fast-mnist1d-seq">')
    section = md[start:md.index('<a id="rnn-best-mnist1d-seq">')]
    line = bullet(section, "- BN-LSTM's two scores")
    ema = [_last3(bn[s], "test_error") for s in range(5)]
    pop = [_last3(bn[s], "eval_test_error") for s in range(5)]
    gap = (sum(ema) - sum(pop)) / 5
    assert f"{gap * 100:+.1f} pp test error ({sum(ema) / 5 * 100:.1f}% vs " \
           f"{sum(pop) / 5 * 100:.1f}%; per seed " in line
    assert ", ".join(f"{(e - p) * 100:+.1f}" for e, p in zip(ema, pop)) + " pp)" in line
    # the lag signature: the EMA score moves between evaluations, the population one does not
    assert "the EMA score moves by 3.0 pp on average, the population score by 0.0 pp" in line
    if batchmean:
        bm = sum(_last3(bn[s], "batchmean_test_error") for s in range(5)) / 5
        assert "over batches of 32" in line
        assert f"EMA − batch mean, {(sum(ema) / 5 - bm) * 100:+.1f} pp" in line
        assert f"batch mean − population, {(bm - sum(pop) / 5) * 100:+.1f} pp" in line
    else:
        assert "do not record the score with the average of per-batch statistics" in line
    # the same sentence in the claim on the final error, or a pointer to it (the report prints
    # no paragraph twice)
    best = " ".join(md[md.index('<a id="rnn-best-mnist1d-seq">'):].split())
    assert line in best or "as under [rnn-fast-mnist1d-seq](#rnn-fast-mnist1d-seq)" in best

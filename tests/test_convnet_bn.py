"""The ConvNet of section 6.7 with batch norm at batch size 1 (summary B's "BN collapses at batch
1"): its output must still depend on its input, or a "collapse" would be the architecture's."""
from __future__ import annotations

import torch

from layernorm_paper.data.registry import load_dataset
import layernorm_paper.reproduce  # noqa: F401  (registers the models)
from layernorm_paper.models.classifiers import convnet

from .test_report import bullet


def _logit_spread(m, x: torch.Tensor, batch: int) -> float:
    """Mean over classes of the logits' std across the inputs, fed in batches of ``batch``
    (training mode: batch norm uses the statistics of each batch)."""
    with torch.no_grad():
        out = torch.cat([m(x[i:i + batch]) for i in range(0, len(x), batch)])
    return float(out.std(0).mean())


def test_bn_convnet_output_at_batch_one_depends_on_its_input():
    torch.manual_seed(0)
    ds = load_dataset("digits-image", split_seed=0, limit_train=128, limit_test=8)
    x = ds.x_train[:128]
    m = convnet(ds, "batch", channels=(16, 32, 32), unbiased=True).train()
    assert m.features(x[:1]).shape[-2:] == (2, 2)     # the 8x8 digits end on a 2x2 map
    at_1, at_128 = _logit_spread(m, x, 1), _logit_spread(m, x, 128)
    # Anchor: the same weights at batch 128. With global average pooling after the last BN the
    # batch-1 spread is about a tenth of it (each channel's pooled pre-ReLU value is exactly β);
    # a model mapping every input to the same logits has spread 0.
    assert at_1 > 0.5 * at_128, (at_1, at_128)
    # ... and the other norms do not depend on the batch at all
    for norm in ("none", "layer"):
        other = convnet(ds, norm, channels=(16, 32, 32)).train()
        assert abs(_logit_spread(other, x, 1) - _logit_spread(other, x, 128)) < 1e-5


def test_bn_at_batch_one_removes_each_channels_spatial_mean():
    """Why the head is not global average pooling: at batch 1 the BN output's spatial mean per
    channel is its bias, whatever the image (the premise of the flattened head)."""
    torch.manual_seed(1)
    ds = load_dataset("digits-image", split_seed=0, limit_train=8, limit_test=8)
    m = convnet(ds, "batch", channels=(4, 8)).train()
    bn = m.features[-2][1]
    with torch.no_grad():
        bn.bias.uniform_(-1, 1)
        pre = m.features[:-1](ds.x_train[:1])          # the last BN's output, before the ReLU
    torch.testing.assert_close(pre.mean((2, 3))[0], bn.bias.detach(), atol=1e-5, rtol=0)
    # the flattened head sees every position: its input width is channels x positions
    assert m.head.in_features == 8 * pre.shape[-2] * pre.shape[-1]


def test_collapse_claim_reads_what_fails_from_the_training_losses(tmp_path, monkeypatch):
    """cnn-bn-collapse prints, per batch size, BN's train-mode loss (batch statistics) and
    eval-mode training NLL next to the un-normalized network's: a BN that does not fit even in
    train mode is told apart from a train/test mismatch of its statistics."""
    import json

    import layernorm_paper.report.figures as figures
    from layernorm_paper import report as R
    monkeypatch.setattr(figures, "draw", lambda fig, inp, path: None)
    losses = {("batch", 128): 0.02, ("batch", 4): 0.05, ("batch", 1): 2.3,
              ("layer", 128): 0.02, ("layer", 4): 0.03, ("layer", 1): 0.04,
              ("none", 128): 0.1, ("none", 4): 0.12, ("none", 1): 0.2}
    rows_of = {}
    for (norm, b), loss in losses.items():
        for seed in range(5):
            rows = []
            for i, step in enumerate((25, 50, 100, 200, 400)):
                err = 0.9 if (norm, b) == ("batch", 1) else 0.03 + 0.001 * seed
                row = {"step": step, "epoch": 1, "train_loss": loss + 0.01 * seed + 0.001 * i,
                       "test_loss": 1.0, "test_error": err, "wall_time": float(i),
                       "eval_train_nll": loss / 2 + 0.01 * seed}
                if norm == "batch":
                    row |= {"eval_test_error": err, "eval_test_loss": 1.0,
                            "bn_scoring": "population"}
                rows.append(row)
            cfg = {"experiment": "cnn_batch_size", "dataset": "digits-image", "model": "convnet",
                   "norm": norm, "batch_size": b, "seed": seed, "steps": 400, "eval_every": 25,
                   "optimizer": "adam", "lr": 1e-3, "model_args": {"channels": [4, 8]},
                   "data_args": {"split_seed": seed}}
            d = tmp_path / "runs" / "cnn_batch_size" / f"{norm}-b{b}-s{seed}"
            d.mkdir(parents=True)
            (d / "config.json").write_text(json.dumps(cfg))
            (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            (d / "done").write_text("")
            rows_of[norm, b, seed] = rows
    R.build_report(tmp_path)
    md = (tmp_path / "report.md").read_text()
    section = md[md.index('<a id="cnn-bn-collapse">'):md.index('<a id="cnn-ln-stable">')]
    line = bullet(section, "- Training NLL")

    def mean(norm, b, key):
        return sum(sum(r[key] for r in rows_of[norm, b, s][-3:]) / 3 for s in range(5)) / 5
    for b in (4, 1, 128):
        assert (f"batch {b}: BN train-mode {mean('batch', b, 'train_loss'):.3g}, eval-mode "
                f"{mean('batch', b, 'eval_train_nll'):.3g}, no normalization train-mode "
                f"{mean('none', b, 'train_loss'):.3g}") in line
    assert "a network that does not fit at that batch size" in line

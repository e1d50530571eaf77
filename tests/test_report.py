"""Verdict rules and the report builder, on synthetic run directories (no training)."""
import json
import pytest

from layernorm import report as R
from layernorm.verdicts import INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED


# --- synthetic run directories ----------------------------------------------------------------

def write_run(root, name, config, rows, done=True):
    d = root / "runs" / name
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps(config))
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if done:
        (d / "done").write_text("")
    return d


def ff_rows(final_err, epochs=3, nll0=1.0):
    rows = []
    for e in range(1, epochs + 1):
        f = e / epochs
        rows.append({"step": e * 10, "epoch": e, "train_loss": nll0 * (1.2 - f),
                     "test_loss": 1.0, "test_error": 0.5 + (final_err - 0.5) * f,
                     "wall_time": float(e)})
    return rows


def write_batch_experiment(root, exp, errs: dict, nll0: dict | None = None):
    """errs[(norm, batch)] = list of final errors, one per seed."""
    for (norm, b), vals in errs.items():
        vals = list(vals) + [vals[0] + 0.001, vals[1] - 0.001][:max(0, 5 - len(vals))]
        for seed, err in enumerate(vals):
            cfg = {"experiment": exp, "task": "digits", "model": "mlp", "norm": norm,
                   "batch_size": b, "seed": seed, "model_args": {}, "data_args": {}}
            write_run(root, f"{exp}/{norm}-b{b}-s{seed}", cfg,
                      ff_rows(err, nll0=(nll0 or {}).get(norm, 1.0)))


def verdicts(root):
    R.build_report(root)
    return {r["claim"]: r["verdict"] for r in json.loads((root / "summary.json").read_text())}


def test_report_bn_suffers_supported_and_ln_not_faster(tmp_path):
    errs = {("batch", 128): [0.05, 0.06, 0.055], ("batch", 4): [0.20, 0.22, 0.21],
            ("layer", 128): [0.05, 0.052, 0.051], ("layer", 4): [0.052, 0.05, 0.053],
            ("none", 128): [0.07, 0.07, 0.072], ("none", 4): [0.08, 0.08, 0.081]}
    # LN's training NLL is *higher* than BN's: "LN faster than BN" must come out not supported
    write_batch_experiment(tmp_path, "mlp_batch_size", errs, nll0={"layer": 2.0, "batch": 1.0})
    v = verdicts(tmp_path)
    assert v["6.6-bn"] == SUPPORTED
    assert v["6.6-ln"] == SUPPORTED
    assert v["6.6-fast"] == NOT_SUPPORTED
    md = (tmp_path / "report.md").read_text()
    assert "## Summary" in md and "Reduced-scale run" in md
    assert "figures/mlp_batch_size_curves.png" in md
    assert (tmp_path / "figures" / "mlp_batch_size_error_vs_batch.png").stat().st_size > 1000
    # claims whose experiment was not run say so, never guessed
    assert v["6.7-bn-ln"] == R.NOT_RUN and v["table1"] == R.NOT_RUN


def test_report_cnn_seed_claim_not_supported_and_inconclusive(tmp_path):
    errs = {("batch", 128): [0.03, 0.031, 0.029], ("batch", 4): [0.035, 0.034, 0.036],
            ("batch", 1): [0.04, 0.041, 0.039],                 # no collapse: not supported
            ("layer", 128): [0.04, 0.041, 0.039], ("layer", 4): [0.02, 0.10, 0.30],  # noisy
            ("layer", 1): [0.04, 0.04, 0.041],
            ("none", 128): [0.08, 0.081, 0.079]}
    write_batch_experiment(tmp_path, "cnn_batch_size", errs)
    v = verdicts(tmp_path)
    assert v["seed-cnn-bn"] == NOT_SUPPORTED
    assert v["seed-cnn-ln"] == INCONCLUSIVE
    assert v["6.7-ln-none"] == SUPPORTED and v["6.7-bn-ln"] == SUPPORTED
    # the paper's statement holds as a whole here, the seed's does not
    assert v["6.7-paper"] == SUPPORTED and v["seed-cnn"] == NOT_SUPPORTED


def test_unfinished_runs_are_ignored(tmp_path):
    cfg = {"experiment": "mlp_batch_size", "norm": "batch", "batch_size": 4, "seed": 0}
    write_run(tmp_path, "x", cfg, ff_rows(0.1), done=False)
    assert R.load_runs(tmp_path) == []


def rnn_rows(errs, hidden_std):
    return [{"step": 50 * (i + 1), "epoch": 1, "train_loss": 2 * e, "test_loss": 2 * e,
             "test_error": e, "wall_time": float(i), "hidden_mean": [0.0] * len(h),
             "hidden_std": h} for i, (e, h) in enumerate(zip(errs, hidden_std))]


def test_report_rnn_claims(tmp_path):
    T = 6
    flat = [[0.0] + [0.3] * (T - 1)] * 4
    drifting = [[0.0] + [0.1 * (k + 1) * (1 + t / T) for t in range(T - 1)] for k in range(4)]
    curves = {"layer": [0.5, 0.2, 0.1, 0.1], "none": [0.8, 0.6, 0.4, 0.3],
              "batch": [0.8, 0.5, 0.3, 0.2]}
    for norm, errs in curves.items():
        for seed in range(5):
            jitter = 0.01 * seed
            cfg = {"experiment": "rnn_norms", "task": "mnist1d-seq", "norm": norm, "batch_size": 32,
                   "seed": seed, "model_args": {}}
            write_run(tmp_path, f"rnn/{norm}-{seed}", cfg,
                      rnn_rows([e + jitter for e in errs], flat if norm == "layer" else drifting))
    for gain, errs in ((1.0, [0.5, 0.2, 0.1, 0.1]), (0.1, [0.8, 0.6, 0.3, 0.2])):
        for seed in range(5):
            cfg = {"experiment": "lstm_gain_init", "task": "mnist1d-seq", "norm": "layer",
                   "batch_size": 32, "seed": seed, "model_args": {"gain_init": gain}}
            write_run(tmp_path, f"gain/{gain}-{seed}", cfg, rnn_rows(errs, flat))
    v = verdicts(tmp_path)
    assert v["rnn-fast-mnist1d-seq"] == SUPPORTED
    assert v["rnn-best-mnist1d-seq"] == SUPPORTED
    assert v["rnn-hidden-mnist1d-seq"] == SUPPORTED
    assert v["6.2-gain"] == SUPPORTED
    assert (tmp_path / "figures" / "rnn_norms_mnist1d-seq_hidden.png").exists()


def test_report_analysis_claims(tmp_path):
    inv = {m: {t: {"invariant": bool(ok), "max_abs_change": 0.0 if ok else 1.0}
               for t, ok in cells.items()} for m, cells in R.PAPER_TABLE1.items()}
    inv["weight"]["dataset_rescaling"] = {"invariant": True, "max_abs_change": 0.0}  # one differs
    (tmp_path / "analysis" / "geometry").mkdir(parents=True)
    (tmp_path / "analysis" / "invariance.json").write_text(json.dumps(inv))
    layer = {"norm_growth": 2.0, "eff_lr_early": 0.02, "eff_lr_late": 0.005,
             "eff_lr_exponent_vs_norm": -2.0}
    geo = {"curvature": {"methods": {
        "layer": {"main": "W", "exponent": -2.0}, "batch": {"main": "w_i", "exponent": -1.99},
        "weight": {"main": "w_i", "exponent": -2.01}, "none": {"main": "w_i", "exponent": 0.05}}},
        "training": {"layer/sgd": {"summary": {"layers": [layer]}}}}
    (tmp_path / "analysis" / "geometry" / "geometry.json").write_text(json.dumps(geo))
    v = verdicts(tmp_path)
    assert v["table1"] == NOT_SUPPORTED
    assert v["5.2-curvature"] == SUPPORTED and v["5.2-lr-decay"] == SUPPORTED
    # a plain GLM whose curvature also fell like d^-2 would refute the contrast
    geo["curvature"]["methods"]["none"]["exponent"] = -2.0
    (tmp_path / "analysis" / "geometry" / "geometry.json").write_text(json.dumps(geo))
    assert verdicts(tmp_path)["5.2-curvature"] == NOT_SUPPORTED
    assert "weight/dataset_rescaling" in (tmp_path / "report.md").read_text()


def test_report_cli_and_bad_dir(tmp_path, capsys):
    from layernorm.cli import main
    with pytest.raises(FileNotFoundError, match="--out"):
        R.build_report(tmp_path / "nope")
    assert main(["report", str(tmp_path / "nope")]) == 2
    assert "--out" in capsys.readouterr().err
    assert main(["report", str(tmp_path)]) == 0
    assert "6.6-bn" in capsys.readouterr().out

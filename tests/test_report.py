"""The report builder on synthetic run directories (no training): which numbers each claim
compares, how BN is scored, the totals, how each claim says it could be wrong, and bad input."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from layernorm_paper import report as R
from layernorm_paper.analysis.invariance import PAPER_TABLE
from layernorm_paper.report import claims as C
from layernorm_paper.report import scoring as S
from layernorm_paper.verdicts import INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED

ROOT = Path(__file__).resolve().parents[1]
STEPS = (25, 50, 100, 200, 400)


def write_run(root, name, config, rows, done=True):
    d = root / "runs" / name
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps(config))
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if done:
        (d / "done").write_text("")
    return d


def ff_rows(final_err, *, nll_final=0.01, ema_err=None, fair=True, bn=False, spike=None):
    """Evaluations at STEPS: error falls from 50% to ``final_err``, eval-mode train NLL from 1 to
    ``nll_final`` (log-linearly). BN rows: ``test_error`` is the EMA score (``ema_err``),
    ``eval_test_error`` the population-statistics one."""
    rows = []
    for i, s in enumerate(STEPS):
        f = (i + 1) / len(STEPS)
        err = 0.5 + (final_err - 0.5) * min(1.0, f / 0.6)    # flat over the last evaluations
        row = {"step": s, "epoch": s / 100, "train_loss": 1.0 - 0.5 * f, "test_loss": 1.0,
               "test_error": err if ema_err is None else 0.5 + (ema_err - 0.5) * f,
               "wall_time": float(i)}
        if fair:
            row["eval_train_nll"] = nll_final ** f
            if bn:     # the runner's test_error is then the EMA score
                row |= {"eval_test_error": err, "eval_test_loss": 1.0, "bn_scoring": "population"}
            else:
                row["test_error"] = err
        rows.append(row)
    if spike is not None:
        rows[-1]["test_error"] += spike
    return rows


def write_batch_experiment(root, exp, errs: dict, **kw):
    """errs[(variant, batch)] = list of final errors, one per seed; variant "batch-all" is BN
    with model_args bn_logits. kw[(variant)] -> ff_rows keywords."""
    for (variant, b), vals in errs.items():
        norm = "batch" if variant.startswith("batch") else variant
        for seed, err in enumerate(vals):
            margs = {"hidden": [128, 128]} | ({"bn_logits": True} if variant == "batch-all"
                                              else {})
            cfg = {"experiment": exp, "dataset": "digits", "model": "mlp", "norm": norm,
                   "batch_size": b, "seed": seed, "steps": STEPS[-1], "eval_every": 25,
                   "optimizer": "adam", "lr": 1e-3, "model_args": margs,
                   "data_args": {"split_seed": seed}}
            extra = kw.get(variant, {})
            extra = extra(seed) if callable(extra) else extra
            write_run(root, f"{exp}/{variant}-b{b}-s{seed}", cfg,
                      ff_rows(err, bn=norm == "batch", **extra))


def five(*centres, spread=0.001):
    return [[c + spread * d for d in (-2, -1, 0, 1, 2)] for c in centres]


def prose(root) -> str:
    """report.md with its wrapped prose lines joined (whitespace runs read as one space)."""
    return " ".join((root / "report.md").read_text().split())


def summary(root):
    R.build_report(root)
    return {r["claim"]: r for r in json.loads((root / "summary.json").read_text())}


def verdicts(root):
    return {k: v["verdict"] for k, v in summary(root).items()}


# --- 6.6: the MLP -----------------------------------------------------------------------------

def test_mlp_claims_use_the_papers_bn_and_eval_mode_nll(tmp_path):
    b128, b4 = five(0.010, 0.025)
    errs = {("batch-all", 128): b128, ("batch-all", 4): b4,
            ("batch", 128): b128, ("batch", 4): five(0.0105)[0],       # hidden-only: no rise
            ("layer", 128): five(0.012)[0], ("layer", 4): five(0.013)[0],
            ("none", 128): five(0.02)[0], ("none", 4): five(0.02)[0]}
    # LN's eval-mode train NLL ends 4x lower than BN's (on every layer)
    write_batch_experiment(tmp_path, "mlp_batch_size", errs,
                           layer={"nll_final": 0.0025}, **{"batch-all": {"nll_final": 0.01}})
    (tmp_path / "reproduce.json").write_text(json.dumps({"preset": "quick", "budgets": {
        "mlp_batch_size": {"rule": "same updates", "text": "400 updates at every batch size"}}}))
    s = summary(tmp_path)
    assert s["6.6-bn"]["verdict"] == SUPPORTED
    assert s["6.6-ln"]["verdict"] == SUPPORTED
    assert s["6.6-fast"]["verdict"] == SUPPORTED and "×" in s["6.6-fast"]["key"]
    md = prose(tmp_path)
    # the hidden-only BN variant is judged by the same rule, shown, not counted
    assert "Batch norm on the hidden layers only (`batch`), same rule, not counted: " \
           "**not supported**" in md
    assert "Judged with batch norm on every layer" in md
    # how it could be wrong: settings vs the paper, updates, seeds, BN scoring, the interval
    assert "Settings: digits; mlp width [128, 128]" in md and "784-1000-1000-10" in md
    assert "Updates per arm: batch norm, all layers @ batch 4 400" in md
    assert "Budget: 400 updates at every batch size; every arm made the same number of " \
           "updates" in md
    assert "Seeds: 0-4 (5 per arm" in md
    assert "population statistics recomputed" in md and "EMA test error %" in md
    assert "95% paired t-interval" in md and "The test split varies with the seed" in md
    assert f"mean of its last {S.LAST_K} evaluations" in md
    assert (tmp_path / "figures" / "mlp_batch_size_error_vs_batch.png").stat().st_size > 1000


def test_trains_faster_needs_eval_mode_nll(tmp_path):
    errs = {(n, b): five(0.02)[0] for n in ("batch", "layer") for b in (128, 4)}
    write_batch_experiment(tmp_path, "mlp_batch_size", errs, batch={"fair": False},
                           layer={"fair": False})
    s = summary(tmp_path)
    assert s["6.6-fast"]["verdict"] == R.NOT_RUN
    assert "eval-mode training NLL" in s["6.6-fast"]["key"]
    md = prose(tmp_path)
    assert "(`eval_train_nll`): the train-mode running loss" in md
    # without population statistics, BN is scored (and labelled) with its running averages
    assert "running averages (EMA" in md


def test_bn_is_scored_with_population_statistics_not_the_ema(tmp_path):
    # EMA says BN at batch 4 is terrible (+40 pp); population statistics say it is like batch 128
    errs = {("batch", 128): five(0.02)[0], ("batch", 4): five(0.021)[0],
            ("layer", 128): five(0.02)[0], ("layer", 4): five(0.02)[0]}
    write_batch_experiment(tmp_path, "mlp_batch_size", errs, batch={"ema_err": 0.42})
    s = summary(tmp_path)
    assert s["6.6-bn"]["verdict"] == NOT_SUPPORTED
    assert s["6.6-bn"]["key"].startswith("BN 4 vs 128: +0.10 pp")


def test_a_final_spike_does_not_decide_a_run():
    # Adam's last iterate at batch 4 spikes (1.7% -> 5.9%): the run is scored on its last 3
    rows = [{"step": s, "eval_test_error": 0.017} for s in STEPS]
    rows[-1]["eval_test_error"] = 0.059
    run = R.Run(Path("x"), {"seed": 0}, rows)
    assert abs(S.score(run, S.F_ERROR_FAIR, k=1) - 0.059) < 1e-9
    assert abs(S.score(run, S.F_ERROR_FAIR) - (0.017 * 2 + 0.059) / 3) < 1e-12


# --- 6.7: the ConvNet, composites and totals --------------------------------------------------

def test_cnn_composites_are_judged_from_their_parts_and_not_counted_again(tmp_path):
    errs = {("batch", 128): five(0.030)[0], ("batch", 4): five(0.035)[0],
            ("batch", 1): five(0.04)[0],                       # no collapse: not supported
            ("layer", 128): five(0.040)[0], ("layer", 4): [0.02, 0.10, 0.30, 0.05, 0.04],
            ("layer", 1): five(0.04)[0], ("none", 128): five(0.08)[0]}
    write_batch_experiment(tmp_path, "cnn_batch_size", errs)
    s = summary(tmp_path)
    v = {k: r["verdict"] for k, r in s.items()}
    assert v["cnn-bn-collapse"] == NOT_SUPPORTED
    assert v["cnn-ln-stable"] == INCONCLUSIVE
    assert v["6.7-ln-none"] == SUPPORTED and v["6.7-bn-ln"] == SUPPORTED
    assert v["6.7-paper"] == SUPPORTED and v["cnn-summary-b"] == NOT_SUPPORTED
    assert s["6.7-paper"]["kind"] == "composite" and s["table1"]["kind"] == "check"
    md = prose(tmp_path)
    claims = [r for r in s.values() if r["kind"] == "claim"]
    counted = {k: sum(r["verdict"] == k for r in claims) for k in
               (SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE, R.NOT_RUN)}
    assert f"Claims ({len(claims)}, each once): supported: {counted[SUPPORTED]}," in md
    assert counted[SUPPORTED] == 2          # 6.7-ln-none, 6.7-bn-ln; the composites not again
    assert "Statements of several claims (not counted again): 6.7-paper supported; " \
           "cnn-summary-b not supported" in md


# --- RNNs -------------------------------------------------------------------------------------

def rnn_rows(errs, hidden_std, mse=None):
    rows = []
    for i, (e, h) in enumerate(zip(errs, hidden_std)):
        row = {"step": 50 * (i + 1), "epoch": 1, "train_loss": 2 * e, "test_loss": 2 * e,
               "test_error": e, "wall_time": float(i), "hidden_mean": [0.0] * len(h),
               "hidden_std": h}
        if mse is not None:
            row["test_mse"] = mse
        rows.append(row)
    return rows


def write_rnn(root, exp, task, T, curves, drifting_norms=("none", "batch"), dataset=None):
    n = max(len(e) for e in curves.values())
    flat = [[0.0] + [0.3] * (T - 1)] * n
    drifting = [[0.0] + [0.05 * (k + 1) * 3 ** (t / T) for t in range(T - 1)] for k in range(n)]
    for norm, errs in curves.items():
        for seed in range(5):
            jitter = 0.002 * seed
            cfg = {"experiment": exp, "task": task, "dataset": dataset or task, "norm": norm,
                   "batch_size": 32, "seed": seed, "steps": 200, "model": "rnn_classifier",
                   "model_args": {"hidden": 48}, "data_args": {}}
            write_run(root, f"{exp}/{task}-{norm}-{seed}", cfg,
                      rnn_rows([e + jitter for e in errs],
                               drifting if norm in drifting_norms else flat,
                               mse=0.01 if dataset == "adding" else None))


# every arm flat over its last half (the guards need flattened arms for a final-value verdict)
CURVES = {"layer": [0.5, 0.2, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1],
          "none": [0.8, 0.7, 0.6, 0.3, 0.3, 0.3, 0.3, 0.3],
          "batch": [0.8, 0.5, 0.3, 0.2, 0.2, 0.2, 0.2, 0.2]}


def test_rnn_fastest_counts_to_the_target_the_record_fixed(tmp_path, monkeypatch):
    """``Record.targets``: the RNN "converges fastest" rule counts steps to the record's value
    for the runs' dataset, not to the fixed grid of the task's trivial predictor."""
    from dataclasses import replace

    from layernorm_paper.records import RECORDS
    from layernorm_paper.report.claims.rnn import claim_rnn_fastest
    write_rnn(tmp_path, "rnn_norms", "mnist1d-seq", 10, CURVES)
    fast = claim_rnn_fastest("rnn_norms", "mnist1d-seq")
    derived = fast(R.read_inputs(tmp_path))
    assert derived.notes[0].startswith("Target: 22.5% test error, 75% better than the uniform "
                                       "guess over 10 classes")
    monkeypatch.setitem(RECORDS, "rnn_norms",
                        replace(RECORDS["rnn_norms"], targets={"mnist1d-seq": 0.15}))
    fixed = fast(R.read_inputs(tmp_path))
    assert fixed.notes[0] == ("Target: 15.0% test error, fixed in the experiment's record "
                              "before the run.")
    assert "≤ 15.0%" in fixed.verdict.rule and derived.key_number != fixed.key_number


def test_rnn_claims_and_hidden_stability_needs_long_sequences(tmp_path, monkeypatch):
    import layernorm_paper.report.figures as figures
    monkeypatch.setattr(figures, "draw", lambda fig, inp, path: None)   # drawn once, below
    write_rnn(tmp_path, "rnn_norms", "mnist1d-seq", 10, CURVES)
    write_rnn(tmp_path, "rnn_norms", "adding", 30, CURVES, dataset="adding")
    s = summary(tmp_path)
    assert s["rnn-fast-mnist1d-seq"]["verdict"] == SUPPORTED
    assert s["rnn-best-mnist1d-seq"]["verdict"] == SUPPORTED
    # no stability experiment: one claim, not run, saying what it needs
    assert "rnn-hidden-mnist1d-seq" not in s
    assert s["rnn-hidden-adding"]["verdict"] == R.NOT_RUN
    assert "rnn_stability" in s["rnn-hidden-adding"]["key"]
    md = prose(tmp_path)
    assert "test MSE (mean of last 3)" in md          # the adding problem reports its MSE
    # a stability experiment at T = 30 is refused; at T = 120 it is judged
    write_rnn(tmp_path, "rnn_stability", "adding", 30, CURVES, dataset="adding")
    s = summary(tmp_path)
    assert s["rnn-hidden-adding"]["verdict"] == R.NOT_RUN and "T = 30" in \
        s["rnn-hidden-adding"]["key"]
    import shutil
    shutil.rmtree(tmp_path / "runs" / "rnn_stability")
    write_rnn(tmp_path, "rnn_stability", "adding", 120, CURVES, dataset="adding")
    monkeypatch.undo()
    s = summary(tmp_path)
    assert s["rnn-hidden-adding"]["verdict"] == SUPPORTED
    assert (tmp_path / "figures" / "rnn_stability_adding_hidden.png").exists()


def test_gain_init(tmp_path):
    for gain, errs in ((1.0, [0.5, 0.2, 0.1, 0.1]), (0.1, [0.8, 0.6, 0.3, 0.2])):
        for seed in range(5):
            cfg = {"experiment": "lstm_gain_init", "task": "mnist1d-seq", "norm": "layer",
                   "batch_size": 32, "seed": seed, "model_args": {"gain_init": gain}}
            write_run(tmp_path, f"gain/{gain}-{seed}", cfg,
                      rnn_rows([e + 0.002 * seed for e in errs], [[0.0, 0.3]] * 4))
    assert verdicts(tmp_path)["6.2-gain"] == SUPPORTED


# --- analysis ---------------------------------------------------------------------------------

def write_analysis(root, ln_ratio=0.25, none_ratio=0.27, none_exponent=0.05, differ=True):
    inv = {m: {t: {"invariant": bool(ok), "max_abs_change": 0.0 if ok else 1.0}
               for t, ok in cells.items()} for m, cells in PAPER_TABLE.items()}
    if differ:
        inv["weight"]["dataset_rescaling"] = {"invariant": True, "max_abs_change": 0.0}
    (root / "analysis" / "geometry").mkdir(parents=True, exist_ok=True)
    (root / "analysis" / "invariance.json").write_text(json.dumps(inv))

    from .test_kl_step import _arms, kl_section
    geo = {"curvature": {"methods": {
        "layer": {"main": "W", "exponent": -2.0}, "batch": {"main": "w_i", "exponent": -1.99},
        "weight": {"main": "w_i", "exponent": -2.01},
        "none": {"main": "w_i", "exponent": none_exponent}}},
        "kl_step": kl_section(*_arms(math.log(ln_ratio), math.log(none_ratio)))}
    (root / "analysis" / "geometry" / "geometry.json").write_text(json.dumps(geo))


def test_analysis_checks_and_the_lr_decay_against_no_norm(tmp_path):
    write_analysis(tmp_path)
    s = summary(tmp_path)
    assert s["table1"]["verdict"] == NOT_SUPPORTED and s["table1"]["kind"] == "check"
    assert s["5.2-curvature"]["verdict"] == SUPPORTED
    # LN's per-update KL falls about as much as the un-normalized network's: nothing LN adds
    assert s["5.2-lr-decay"]["verdict"] == NOT_SUPPORTED and s["5.2-lr-decay"]["kind"] == "claim"
    md = prose(tmp_path)
    assert "Checks (deterministic measurements, no seeds): 1/2 hold" in md
    assert "weight/dataset_rescaling" in md
    write_analysis(tmp_path, ln_ratio=0.1, none_ratio=0.27, differ=False)
    s = summary(tmp_path)
    assert s["5.2-lr-decay"]["verdict"] == SUPPORTED and s["table1"]["verdict"] == SUPPORTED
    assert "Checks (deterministic measurements, no seeds): 2/2 hold" in \
        prose(tmp_path)
    # the fit's scales are the geometry run's own, not a number typed into the report
    geo = json.loads((tmp_path / "analysis" / "geometry" / "geometry.json").read_text())
    geo["curvature"]["scales"] = [0.5, 1.0, 2.0]
    (tmp_path / "analysis" / "geometry" / "geometry.json").write_text(json.dumps(geo))
    R.build_report(tmp_path)
    assert "over 3 scales d from 0.5 to 2." in prose(tmp_path)
    # a plain GLM whose curvature also fell like d^-2 would refute the contrast
    write_analysis(tmp_path, none_exponent=-2.0)
    assert verdicts(tmp_path)["5.2-curvature"] == NOT_SUPPORTED


def test_table1_is_the_analysis_modules_and_claims_draw_nothing():
    assert R.PAPER_TABLE1 is PAPER_TABLE
    assert C.STABLE_MARGIN <= C.SUFFERS_MARGIN
    code = ("import sys, layernorm_paper.report.claims, layernorm_paper.report.runs; "
            "sys.exit(1 if 'matplotlib' in sys.modules else 0)")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr


def test_a_claim_is_one_catalog_line_in_its_record(monkeypatch):
    """The report lists what the records say: a catalog line added to one record (here a
    second gain claim) is a claim of the report, in the record's place, with nothing else
    edited."""
    import dataclasses

    from layernorm_paper import records
    rec = records.RECORDS["lstm_gain_init"]

    def claims(found, rules):
        return rec.claims(found, rules) + [rules.Claim(
            "6.2-gain-again", "paper 6.2", "“the same, once more”", rec.name,
            rules.claim_gain_init(rec.name), "6.2 gain initialisation")]
    monkeypatch.setitem(records.RECORDS, rec.name, dataclasses.replace(rec, claims=claims))
    ids = [c.id for c, _ in C.judge(R.Inputs(out=Path("/nowhere"), runs=[]))]
    assert ids[ids.index("6.2-gain") + 1] == "6.2-gain-again"


def test_no_typed_in_result_in_the_report_generator():
    """Every sentence of a report is computed from its runs or states the method: the report's
    code and the records hold no measured observation to print (pilot runs, a value a curve
    was seen to flatten at, a note of a run measured apart)."""
    src = ROOT / "src" / "layernorm_paper"
    texts = {p: p.read_text(encoding="utf-8") for d in ("report", "records")
             for p in (src / d).rglob("*.py")}
    for phrase in ("pilot", "flat from", "measured apart", "close to its budget",
                   "over the 10-minute budget", "READER_BN_NOTE"):
        assert not [p.name for p, t in texts.items() if phrase in t], phrase


# --- bad input --------------------------------------------------------------------------------

def _cli(args, capsys):
    from layernorm_paper.cli import main
    code = main(["report", *map(str, args)])
    return code, capsys.readouterr()


def test_missing_file_empty_and_unfinished(tmp_path, capsys):
    code, io = _cli([tmp_path / "nope"], capsys)
    assert code == 2 and "does not exist" in io.err and "--out" in io.err
    (tmp_path / "f.txt").write_text("x")
    code, io = _cli([tmp_path / "f.txt"], capsys)
    assert code == 2 and "which is a file" in io.err and "Traceback" not in io.err
    empty = tmp_path / "empty"
    empty.mkdir()
    code, io = _cli([empty], capsys)
    assert code == 2 and "nothing to judge" in io.err and len(io.err.strip().splitlines()) == 1
    assert not (empty / "report.md").exists()
    write_run(empty, "mlp_batch_size/x", {"experiment": "mlp_batch_size", "norm": "batch",
                                          "batch_size": 4, "seed": 0}, ff_rows(0.1), done=False)
    assert R.load_runs(empty) == []
    code, io = _cli([empty], capsys)
    assert code == 2 and "1 run directories have no `done`" in io.err


@pytest.mark.parametrize("which", ["config.json", "env.json", "reproduce.json",
                                   "invariance.json"])
def test_json_errors_name_the_file(tmp_path, capsys, which):
    d = write_run(tmp_path, "mlp_batch_size/a", {"experiment": "mlp_batch_size", "norm": "layer",
                                                 "batch_size": 4, "seed": 0}, ff_rows(0.1))
    path = {"config.json": d / "config.json", "env.json": d / "env.json",
            "reproduce.json": tmp_path / "reproduce.json",
            "invariance.json": tmp_path / "analysis" / "invariance.json"}[which]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"preset": "quick", ')
    code, io = _cli([tmp_path], capsys)
    assert code == 2 and str(path) in io.err and "not valid JSON" in io.err
    assert len(io.err.strip().splitlines()) == 1 and "Traceback" not in io.err


def test_metrics_row_without_step_is_a_clear_error(tmp_path, capsys):
    d = write_run(tmp_path, "mlp_batch_size/a", {"experiment": "mlp_batch_size", "norm": "layer",
                                                 "batch_size": 4, "seed": 0}, ff_rows(0.1))
    (d / "metrics.jsonl").write_text(json.dumps({"test_error": 0.1}) + "\n")
    code, io = _cli([tmp_path], capsys)
    assert code == 2 and "missing ['step']" in io.err and str(d) in io.err


def test_rejected_checkpoint_is_a_clear_error(tmp_path, capsys):
    import pickle

    import torch
    exp = tmp_path / "runs" / R.DDP_EXPERIMENT
    for name in ("layer", "layer-w2"):
        d = exp / name
        d.mkdir(parents=True)
        (d / "config.json").write_text(json.dumps({"experiment": R.DDP_EXPERIMENT,
                                                   "norm": "layer", "batch_size": 8}))
        (d / "done").write_text("{}")
        torch.save({"step": 1, "model": {"w": torch.zeros(2)}}, d / "checkpoint.pt")
    # a pickle that weights_only=True rejects (an arbitrary global)
    with open(exp / "layer-w2" / "checkpoint.pt", "wb") as f:
        pickle.dump({"step": 1, "model": {"w": subprocess.Popen}}, f, protocol=2)
    code, io = _cli([tmp_path], capsys)
    assert code == 2 and "layer-w2/checkpoint.pt cannot be read as a checkpoint" in io.err
    assert len(io.err.strip().splitlines()) == 1 and "Traceback" not in io.err


def test_no_tmp_left_after_a_failed_write_and_stale_ones_removed(tmp_path, monkeypatch):
    write_analysis(tmp_path)
    stale = tmp_path / ".report.md.abc123.tmp"
    stale.write_text("half a report")
    import layernorm_paper._io as io_mod

    def fail(src, dst):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(io_mod.os, "replace", fail)
    with pytest.raises(OSError, match="No space"):
        R.build_report(tmp_path)
    monkeypatch.undo()
    left = [p.name for p in tmp_path.rglob("*.tmp")]
    assert left == [], left
    R.build_report(tmp_path)
    assert (tmp_path / "report.md").exists() and not list(tmp_path.rglob("*.tmp"))


def test_cli_prints_the_summary(tmp_path, capsys):
    write_analysis(tmp_path)
    code, io = _cli([tmp_path], capsys)
    assert code == 0 and "table1" in io.out and "check" in io.out


# --- the guards: a verdict only where the experiment can give one ---------------------------

def test_an_arm_still_falling_by_the_margin_is_undertrained(tmp_path):
    # the un-normalized ConvNet still falls by ~5 pp between its last two evaluations
    errs = {("layer", 128): five(0.04)[0], ("none", 128): five(0.08)[0]}
    write_batch_experiment(tmp_path, "cnn_batch_size", errs)
    for d in (tmp_path / "runs" / "cnn_batch_size").iterdir():
        cfg = json.loads((d / "config.json").read_text())
        if cfg["norm"] == "none":
            rows = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
            rows[-2]["test_error"] += 0.05
            (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    s = summary(tmp_path)
    assert s["6.7-ln-none"]["verdict"] == "undertrained"
    md = prose(tmp_path)
    assert "More updates (a higher budget)" in md
    assert "Not judged as run" in md and "undertrained: 1" in md


def test_an_arm_no_better_than_the_trivial_predictor_did_not_learn(tmp_path):
    # BN at batch 128 at chance (90% error on 10 classes): no verdict on "BN beats LN"
    errs = {("batch", 128): five(0.90)[0], ("layer", 128): five(0.04)[0],
            ("none", 128): five(0.08)[0]}
    write_batch_experiment(tmp_path, "cnn_batch_size", errs)
    s = summary(tmp_path)
    assert s["6.7-bn-ln"]["verdict"] == "baseline did not learn"
    assert s["6.7-ln-none"]["verdict"] == SUPPORTED
    md = prose(tmp_path)
    assert "the uniform guess over 10 classes" in md and "0/5 runs learned" in md


def test_the_adding_problem_baseline_must_beat_the_constant_predictor(tmp_path):
    # test MSE 0.169 against 1/6 for predicting the target's mean: the LSTM learned nothing
    write_rnn(tmp_path, "rnn_norms", "adding", 30, CURVES, dataset="adding")
    for d in (tmp_path / "runs" / "rnn_norms").iterdir():
        if json.loads((d / "config.json").read_text())["norm"] == "none":
            rows = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
            (d / "metrics.jsonl").write_text("".join(json.dumps(r | {"test_mse": 0.169}) + "\n"
                                                     for r in rows))
    s = summary(tmp_path)
    assert s["rnn-best-adding"]["verdict"] == "baseline did not learn"
    assert s["rnn-fast-adding"]["verdict"] == "baseline did not learn"


def test_ln_stability_against_the_unnormalized_control(tmp_path):
    # LN and no norm both degrade by 3 pp at batch 4: LN's change beyond the control's is 0
    errs = {("layer", 128): five(0.04)[0], ("layer", 4): five(0.07)[0],
            ("none", 128): five(0.08)[0], ("none", 4): five(0.11)[0]}
    write_batch_experiment(tmp_path, "mlp_batch_size", errs)
    s = summary(tmp_path)
    assert s["6.6-ln"]["verdict"] == SUPPORTED and "control" in s["6.6-ln"]["key"]
    # without the control: LN's own 3 pp rise is outside the ±1 pp band
    errs.pop(("none", 4))
    other = tmp_path / "b"
    write_batch_experiment(other, "mlp_batch_size", errs)
    assert summary(other)["6.6-ln"]["verdict"] == NOT_SUPPORTED


def test_training_nll_decides_ln_faster_than_bn_and_the_error_is_shown(tmp_path):
    # the paper's measure (Fig. 6) decides: BN's training NLL ends 4x LN's; both arms reach 0%
    # training error from the same update, which the notes show beside it (not counted)
    write_batch_experiment(tmp_path, "mlp_batch_size", {
        ("batch-all", 128): five(0.02)[0], ("batch-all", 4): five(0.02)[0],
        ("layer", 128): five(0.02)[0], ("layer", 4): five(0.02)[0]},
        layer={"nll_final": 0.0025}, **{"batch-all": {"nll_final": 0.01}})
    for d in (tmp_path / "runs" / "mlp_batch_size").iterdir():
        rows = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
        (d / "metrics.jsonl").write_text("".join(
            json.dumps(r | {"eval_train_error": max(0.0, 0.3 - r["step"] / 100)}) + "\n"
            for r in rows))
    s = summary(tmp_path)
    assert s["6.6-fast"]["verdict"] == SUPPORTED and "BN/LN train NLL ×" in s["6.6-fast"]["key"]
    md = prose(tmp_path)
    assert "Training error (the mean eval-mode error over evaluations), shown and not counted: " \
        "batch 128: BN" in md and "pp margin **not supported**" in md
    assert "the paper's measure, Fig. 6" in md


def test_an_arm_where_some_runs_did_not_learn_is_reported_as_a_fraction(tmp_path):
    # four LN runs at 4% error and one at chance: the arm learned on average, bimodally
    errs = {("layer", 128): [0.04, 0.04, 0.04, 0.04, 0.90], ("none", 128): five(0.90)[0]}
    write_batch_experiment(tmp_path, "cnn_batch_size", errs)
    s = summary(tmp_path)
    assert s["6.7-ln-none"]["verdict"] == "baseline did not learn"
    errs[("none", 128)] = five(0.30)[0]
    other = tmp_path / "b"
    write_batch_experiment(other, "cnn_batch_size", errs)
    summary(other)
    md = prose(other)
    assert "bimodal: runs that beat the trivial predictor by 10%: layer norm @ batch 128 4/5 runs" \
        in md


def bullet(section: str, start: str) -> str:
    """The report's bullet that begins with ``start``, its wrapped lines joined into one."""
    lines = section.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.startswith(start))
    cont = []
    for ln in lines[i + 1:]:
        if not ln.startswith("  ") or not ln.strip():
            break
        cont.append(ln)
    return " ".join(" ".join([lines[i], *cont]).split())

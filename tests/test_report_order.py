"""The order-embedding claims (paper 6.1) on constructed run directories: recall of the best
validation model and the updates to it — supported, not supported, not run — and the figure."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from layernorm_paper.report import build_report
from layernorm_paper.report.claims import (RECALL_MARGIN, RECALLS, best_row, claim_order_recall,
                                     claim_order_sooner, judge, recall_at_best)
from layernorm_paper.report.runs import Inputs, Run
from layernorm_paper.verdicts import INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED
from .test_report import prose

SEEDS = range(5)
STEPS = [50 * (i + 1) for i in range(10)]      # evaluations at 50 ... 500 updates


def order_rows(best_at: int, recall: float, seed: int, *, late_test: float | None = None):
    """val_c2i_rsum rises to its peak at update ``best_at`` and stays just below it; the test
    recalls of that evaluation are ``recall`` (+ a per-seed jitter), lower elsewhere — or
    ``late_test`` at the last evaluation (a test spike no model selection would pick)."""
    rows = []
    for i, s in enumerate(STEPS):
        peak = s == best_at
        rsum = 150.0 if peak else 150.0 * min(s, best_at) / best_at - (1.0 if s > best_at else 0)
        r = recall + 0.1 * seed if peak else 0.5 * recall
        if late_test is not None and i == len(STEPS) - 1:
            r = late_test
        rows.append({"step": s, "epoch": s / 100, "train_loss": 1.0 / (i + 1), "test_loss": 1.0,
                     "test_error": 0.0, "wall_time": 0.02 * s, "val_c2i_rsum": rsum,
                     "val_r_mean": r, "test_images": 200, "captions_per_image": 5,
                     **{f"test_{k}": r + (10.0 if k.endswith("r10") else 0.0) for k in RECALLS}})
    return rows


def order_runs(arms: dict[str, tuple[int, float]], seeds=SEEDS, **kw) -> list[Run]:
    runs = []
    for norm, (best_at, recall) in arms.items():
        for s in seeds:
            cfg = {"experiment": "paper_order", "dataset": "digit-captions", "model": "order",
                   "norm": norm, "seed": s, "batch_size": 128, "steps": STEPS[-1],
                   "eval_every": 50, "optimizer": "adam", "lr": 1e-3,
                   "model_args": {"hidden": 64}}
            runs.append(Run(Path(f"/nowhere/paper_order/{norm}-{s}"), cfg,
                            order_rows(best_at, recall, s, **kw)))
    return runs


def _inputs(runs, meta=None):
    return Inputs(out=Path("/nowhere"), runs=runs, meta=meta or {})


def test_best_validation_model_is_the_first_maximal_val_rsum():
    run = order_runs({"layer": (200, 40.0)}, seeds=[0], late_test=90.0)[0]
    run.rows[5]["val_c2i_rsum"] = 150.0                   # a tie later: the first one counts
    assert best_row(run)["step"] == 200
    assert recall_at_best(run, "i2c_r1") == 40.0      # not the late test spike (90)
    assert recall_at_best(run, "mean") == 45.0        # R@10 fields are R@1 + 10


def test_the_experiment_picks_the_same_best_validation_model():
    order = pytest.importorskip("layernorm_paper.models.paper")
    for best_at in (50, 200, 500):
        run = order_runs({"none": (best_at, 30.0)}, seeds=[0])[0]
        run.rows[-1]["val_c2i_rsum"] = 150.0               # a tie at the end
        assert order.best_validation(run.rows) is best_row(run)


def test_recall_and_sooner_supported():
    # both arms flat (their validation R-sum no longer rising) over the last quarter
    inp = _inputs(order_runs({"none": (300, 30.0), "layer": (200, 33.0)}))
    rec = claim_order_recall(inp)
    assert rec.status == SUPPORTED
    assert "GRU 35.2, LN-GRU 38.2" in rec.key_number
    assert "46.6 -> 48.5" in rec.notes[0] and "digits paired with generated captions" in \
        rec.notes[0]
    assert any("caption retrieval R@1, same rule, shown and not counted: **supported**" in n
               for n in rec.notes)
    assert any("best validation model (the first evaluation of maximal validation R-sum)" in c
               for c in rec.caveats)
    assert any("Seeds: 0-4" in c for c in rec.caveats)
    soon = claim_order_sooner(inp)
    assert soon.status == SUPPORTED
    assert "GRU 300, LN-GRU 200 updates" in soon.key_number and "×0.67" in soon.key_number
    assert "reached the target: GRU updates to the common target 5/5" in soon.verdict.detail
    assert any("wall-clock" in n for n in soon.notes)
    row = {r["caption encoder"]: r for r in soon.table}
    assert row["LN-GRU"]["best at the last evaluation"] == "0/5"


def test_same_recall_and_later_best_model_not_supported():
    inp = _inputs(order_runs({"none": (200, 30.0), "layer": (300, 30.0 + RECALL_MARGIN / 10)}))
    assert claim_order_recall(inp).status == NOT_SUPPORTED
    assert claim_order_sooner(inp).status == NOT_SUPPORTED
    few = _inputs(order_runs({"none": (300, 30.0), "layer": (200, 33.0)}, seeds=range(3)))
    assert claim_order_recall(few).status == INCONCLUSIVE


def test_an_arm_still_improving_is_undertrained_and_a_worse_best_is_no_head_start():
    # LN-GRU's validation R-sum still rising over the last quarter: no final-value verdict
    inp = _inputs(order_runs({"none": (200, 30.0), "layer": (450, 33.0)}))
    assert claim_order_recall(inp).status == "undertrained"
    # the GRU's best model comes sooner, but it is worse: the common target is the worse arm's
    # best, which the GRU reaches at its own best and LN-GRU on its way up
    runs = order_runs({"none": (200, 30.0), "layer": (300, 33.0)})
    for r in runs:
        if r.norm == "none":
            for row in r.rows:
                row["val_c2i_rsum"] *= 0.5
    soon = claim_order_sooner(_inputs(runs))
    assert "GRU 200, LN-GRU 150 updates to validation R-sum ≥ 75.0" in soon.key_number
    assert soon.status == SUPPORTED


def test_not_run_without_runs_or_fields():
    meta = {"not_run": {"paper_order": "over --quick's budget; run with --preset standard"}}
    res = claim_order_recall(_inputs([], meta))
    assert res.status == "not run" and "--preset standard" in res.verdict.detail
    assert res.key_number == "no finished runs of `paper_order`"
    half = _inputs(order_runs({"none": (400, 30.0)}))
    assert "layer" in claim_order_sooner(half).key_number
    runs = order_runs({"none": (400, 30.0), "layer": (200, 33.0)})
    for r in runs:
        for row in r.rows:
            del row["val_c2i_rsum"]
    res = claim_order_sooner(_inputs(runs))
    assert res.status == "not run" and "`val_c2i_rsum`" in res.verdict.detail


def test_report_section_figure_and_not_run_list(tmp_path):
    for r in order_runs({"none": (300, 30.0), "layer": (200, 33.0)}):
        d = tmp_path / "runs" / "paper_order" / r.path.name
        d.mkdir(parents=True)
        (d / "config.json").write_text(json.dumps(r.config))
        (d / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in r.rows))
        (d / "done").write_text("")
    build_report(tmp_path)
    s = {r["claim"]: r for r in json.loads((tmp_path / "summary.json").read_text())}
    assert s["6.1-order-recall"]["verdict"] == SUPPORTED
    assert s["6.1-order-sooner"]["verdict"] == SUPPORTED
    md = prose(tmp_path)
    assert "## 6.1 order embeddings (reduced form)" in md
    assert "order embeddings on MS-COCO (6.1)" in md          # the paper's data: not run
    assert (tmp_path / "figures" / "paper_order_curves.png").stat().st_size > 1000
    assert dict((c.id, r.status) for c, r in judge(_inputs([])))["6.1-order-recall"] == "not run"

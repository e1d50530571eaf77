"""The section 6 claims (DRAW, reader, handwriting, char-LM) on constructed runs: supported, not
supported, not run — and the report's "not run" list of the experiments with no runs."""
from __future__ import annotations

import math
from pathlib import Path

from layernorm.report.claims import (PAPER_NOT_RUN, claim_hw_no_worse, claim_loss_faster,
                                     claim_loss_lower, judge, paper_claims, CHARLM_SPEC,
                                     DRAW_SPEC, DRAW_MARGIN, BPC_MARGIN)
from layernorm.report.markdown import render
from layernorm.report.runs import Inputs, Run
from layernorm.report.scoring import score
from layernorm.verdicts import INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED

SEEDS = range(5)


def _run(exp, norm, seed, curve, key, extra=None, steps=10, dataset="x"):
    rows = [{"step": (i + 1) * steps, "epoch": float(i + 1), key: v, "test_error": 0.0,
             "train_loss": v, **(extra or {})} for i, v in enumerate(curve)]
    cfg = {"experiment": exp, "dataset": dataset, "model": "m", "norm": norm, "seed": seed,
           "batch_size": 8, "steps": steps * len(curve), "optimizer": "adam", "lr": 1e-3}
    return Run(Path(f"/nowhere/{exp}/{norm}-{seed}"), cfg, rows)


def _curve(start, end, n=8, jitter=0.0):
    return [start + (end - start) * (1 - math.exp(-3 * i / (n - 1))) / (1 - math.exp(-3)) + jitter
            for i in range(n)]


def _inputs(runs):
    return Inputs(out=Path("/nowhere"), runs=runs)


def _arms(exp, key, ends, starts=None, dataset="x"):
    starts = starts or {n: 30.0 for n in ends}
    return [_run(exp, n, s, _curve(starts[n], e, jitter=0.01 * s), key, dataset=dataset)
            for n, e in ends.items() for s in SEEDS]


def test_draw_lower_bound_supported_not_supported_and_not_run():
    lower = claim_loss_lower(DRAW_SPEC, DRAW_MARGIN, ("none",))
    good = _inputs(_arms("paper_draw", "test_loss", {"none": 22.0, "layer": 21.0}))
    res = lower(good)
    assert res.status == SUPPORTED and "82.36 -> 82.09" in res.notes[0]
    assert any("Seeds: 0-4" in c for c in res.caveats)
    bad = _inputs(_arms("paper_draw", "test_loss", {"none": 21.0, "layer": 22.0}))
    assert lower(bad).status == NOT_SUPPORTED
    missing = _inputs([r for r in good.runs if r.norm == "none"])
    assert lower(missing).status == "not run" and "layer" in lower(missing).key_number
    few = _inputs([r for r in good.runs if r.seed < 3])
    assert lower(few).status == INCONCLUSIVE


def test_draw_faster_counts_updates_to_the_lstm_final_bound():
    fast = claim_loss_faster(DRAW_SPEC, ("none",))
    starts = {"none": 30.0, "layer": 24.0}       # LN falls below LSTM's final value early
    res = fast(_inputs(_arms("paper_draw", "test_loss", {"none": 22.0, "layer": 21.0}, starts)))
    assert res.status == SUPPORTED and "epochs" in res.key_number
    same = _inputs(_arms("paper_draw", "test_loss", {"none": 22.0, "layer": 22.0}))
    assert fast(same).status == NOT_SUPPORTED


def test_handwriting_judged_on_test_nll_not_test_loss():
    def arms(ln_end):
        out = []
        for n, end in (("none", 1.0), ("layer", ln_end)):
            for s in SEEDS:
                c = _curve(3.0, end, jitter=0.001 * s)
                out.append(_run("paper_handwriting", n, s, c, "test_nll_per_point",
                                {"test_nll": 99.0, "test_loss": 1e3}))
        return _inputs(out)
    assert claim_hw_no_worse(arms(0.9)).status == SUPPORTED
    assert claim_hw_no_worse(arms(1.5)).status == NOT_SUPPORTED
    no_field = _inputs([_run("paper_handwriting", n, s, _curve(3, 1), "test_loss")
                        for n in ("none", "layer") for s in SEEDS])
    res = claim_hw_no_worse(no_field)
    assert res.status == "not run" and "test_nll_per_point" in res.verdict.detail


def test_charlm_bits_per_char_against_both_baselines():
    lower = claim_loss_lower(CHARLM_SPEC, BPC_MARGIN, ("none", "batch"))
    nats = {"none": 2.4, "batch": 2.25, "layer": 2.15}
    inp = _inputs(_arms("paper_charlm", "test_loss", nats, {n: 4.0 for n in nats}))
    res = lower(inp)
    assert res.status == SUPPORTED
    ln = [score(r, "test_loss") for r in inp.runs if r.norm == "layer"]
    assert f"LN-LSTM {sum(ln) / len(ln) / math.log(2):.3f} bits/char" in res.key_number
    nats["batch"] = 2.14                          # BN-LSTM the best: not LN
    assert lower(_inputs(_arms("paper_charlm", "test_loss", nats))).status == NOT_SUPPORTED


def test_reader_uses_the_rnn_rules_and_report_lists_what_is_not_run():
    ends = {"none": 0.15, "batch": 0.7, "layer": 0.05}
    runs = [_run("paper_reader", n, s, _curve(0.8, e, jitter=0.002 * s), "test_error",
                 dataset="cloze") for n, e in ends.items() for s in SEEDS]
    for r in runs:                              # _run put test_error 0.0 after the curve's key
        for row in r.rows:
            row["test_error"] = row["train_loss"]
    inp = _inputs(runs)
    claims = paper_claims()
    results = dict((c.id, res) for c, res in judge(inp, claims))
    assert results["6.2-reader-best"].status == SUPPORTED
    assert "paper (Figure 2)" in results["6.2-reader-best"].notes[0]
    assert results["6.4-draw-bound"].status == "not run"
    md = render(inp, judge(inp, claims), {})
    for name in PAPER_NOT_RUN:
        assert f"`{name}`" in md
    assert "BookCorpus" in md and "MS-COCO" in md

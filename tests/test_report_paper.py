"""The section 6 claims (DRAW, reader, handwriting, char-LM) on constructed runs: supported, not
supported, not run — and the report's "not run" list of the experiments with no runs."""
from __future__ import annotations

import json
import math
from pathlib import Path

from layernorm_paper.report.claims import (PAPER_NOT_RUN, claim_hw_no_worse, claim_loss_faster,
                                     claim_loss_lower, judge, paper_claims, CHARLM_SPEC,
                                     DRAW_SPEC, DRAW_MARGIN, BPC_MARGIN)
from layernorm_paper.report import build_report
from layernorm_paper.report import claims as C
from layernorm_paper.report.markdown import render
from layernorm_paper.report.runs import Inputs, Run
from layernorm_paper.report.scoring import score
from layernorm_paper.verdicts import INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED

SEEDS = range(5)


def _run(exp, norm, seed, curve, key, extra=None, steps=10, dataset="x"):
    rows = [{"step": (i + 1) * steps, "epoch": float(i + 1), key: v, "test_error": 0.0,
             "train_loss": v, **(extra or {})} for i, v in enumerate(curve)]
    cfg = {"experiment": exp, "dataset": dataset, "model": "m", "norm": norm, "seed": seed,
           "batch_size": 8, "steps": steps * len(curve), "optimizer": "adam", "lr": 1e-3}
    return Run(Path(f"/nowhere/{exp}/{norm}-{seed}"), cfg, rows)


def _curve(start, end, n=8, jitter=0.0, rate=12.0):
    """From ``start`` to ``end`` exponentially, flat over its last half (the guards need flattened
    arms for a final-value verdict); ``rate`` 3: still falling at the end."""
    return [start + (end - start) * (1 - math.exp(-rate * i / (n - 1))) / (1 - math.exp(-rate))
            + jitter for i in range(n)]


def _inputs(runs):
    return Inputs(out=Path("/nowhere"), runs=runs)


def _arms(exp, key, ends, starts=None, dataset="x"):
    starts = starts or {n: 30.0 for n in ends}
    return [_run(exp, n, s, _curve(starts[n], e, jitter=0.01 * s), key, dataset=dataset)
            for n, e in ends.items() for s in SEEDS]


def draw_on_mnist(ends, starts):
    """DRAW runs of the full form: MNIST, dynamically binarized (data_args binarize)."""
    runs = _arms("paper_draw", "test_loss", ends, starts, dataset="mnist")
    for r in runs:
        r.config["data_args"] = {"binarize": "dynamic"}
    return runs


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
    # the LSTM's runs above its own mean never reach it: censored, so "not supported" cannot be
    # shown from them, and the fraction that reached is stated
    same = _inputs(_arms("paper_draw", "test_loss", {"none": 22.0, "layer": 22.0}))
    res = fast(same)
    assert res.status == INCONCLUSIVE and "reached the target: LSTM updates to the target 3/5" \
        in res.verdict.detail
    # every run reaches the target at the same update: not faster
    tied = _inputs([_run("paper_draw", n, s, _curve(30.0, 22.0), "test_loss") for n in
                    ("none", "layer") for s in SEEDS])
    assert fast(tied).status == NOT_SUPPORTED


def test_faster_counts_to_the_target_the_record_fixed_not_the_baselines_endpoint(monkeypatch):
    """With ``Record.targets`` set for the runs' dataset, the "faster" rule counts every arm's
    updates to that value, not to the LSTM's final mean (the mean of its last evaluations,
    which some of its own runs never reach)."""
    from dataclasses import replace

    from layernorm_paper.records import RECORDS
    fast = claim_loss_faster(DRAW_SPEC, ("none",))
    curves = {"none": [30, 29, 28, 27, 25.5, 22.5, 22, 22], "layer": [27, 25.5, 24, 23, 22.5, 22,
                                                                     22, 22]}
    runs = _inputs([_run("paper_draw", n, s, [v + 0.01 * s * (i > 5) for i, v in enumerate(c)],
                         "test_loss") for n, c in curves.items() for s in SEEDS])
    endpoint = fast(runs)
    assert "26.00" not in endpoint.key_number and "no target was fixed" in endpoint.notes[1]
    monkeypatch.setitem(RECORDS, "paper_draw",
                        replace(RECORDS["paper_draw"], targets={"x": 26.0}))
    fixed = fast(runs)
    assert "26.00" in fixed.key_number and "fixed in the experiment's record" in fixed.notes[1]
    assert "(fixed in the experiment's record before the run)" in fixed.verdict.rule
    assert fixed.status == SUPPORTED
    # the table counts to it too: every run of both arms reached 26.0
    assert all(row["reached"] == "5/5" for row in fixed.table)


def test_draw_about_twice_as_fast_is_a_ratio_of_update_counts():
    twice = claim_loss_faster(DRAW_SPEC, ("none",), factor=2.0)
    lstm = [_run("paper_draw", "none", s, [30, 28, 26, 24, 23, 22.5, 22.0, 22.0], "test_loss")
            for s in SEEDS]

    def ln(curve):
        return _inputs(lstm + [_run("paper_draw", "layer", s, curve, "test_loss") for s in SEEDS])
    # LSTM reaches 22.0 at update 70; LN at 30 (x2.33) and at 50 (x1.4, short of 2/sqrt 2)
    met = twice(ln([30, 25, 22.0, 21.5, 21.5, 21.5, 21.5, 21.5]))
    assert met.status == SUPPORTED and "×1.41" in met.verdict.rule
    assert twice(ln([30, 26, 24, 23, 22.0, 21.9, 21.9, 21.9])).status == NOT_SUPPORTED


def test_handwriting_judged_on_test_nll_not_test_loss():
    def arms(ln_end):
        out = []
        for n, end in (("none", 1.0), ("layer", ln_end)):
            for s in SEEDS:
                c = _curve(3.0, end, jitter=0.001 * s)
                out.append(_run("paper_handwriting", n, s, c, "test_nll_per_point",
                                {"test_nll": 99.0, "test_loss": 1e3}))
        return _inputs(out)
    # "about the same": TOST inside ±0.02 nats/point; LN far better is not "the same" either
    assert claim_hw_no_worse(arms(1.005)).status == SUPPORTED
    assert claim_hw_no_worse(arms(0.9)).status == NOT_SUPPORTED
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
    assert lower(_inputs(_arms("paper_charlm", "test_loss", nats,
                               {n: 4.0 for n in nats}))).status == NOT_SUPPORTED


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


# --- the sentence completion test, BN with population statistics, the downloaded full forms ---

def _completion_runs(acc: dict, *, sha="ab" * 32, ema=None, pop=True):
    """paper_charlm runs whose completion accuracy rises to ``acc[norm]``; BN rows carry the
    population-statistics fields (``pop``) and the running-average score ``ema``."""
    runs = _arms("paper_charlm", "test_loss", {"none": 2.4, "batch": 2.25, "layer": 2.15},
                 {n: 4.0 for n in ("none", "batch", "layer")}, dataset="docstrings")
    for r in runs:
        curve = _curve(0.2, acc[r.norm], jitter=0.002 * r.seed)
        for row, a in zip(r.rows, curve):
            row |= {"completion_accuracy": a, "completion_chance": 0.2,
                    "completion_questions": 120, "completion_sha256": sha,
                    "completion_python": "3.11.7"}
            if r.norm == "batch" and pop:
                row |= {"bn_scoring": "population", "eval_test_loss": row["test_loss"],
                        "eval_test_error": 0.5}
            if r.norm == "batch" and ema is not None:
                row["ema_completion_accuracy"] = ema
    return runs


def test_completion_accuracy_against_both_baselines_and_one_test_set():
    inp = _inputs(_completion_runs({"none": 0.40, "batch": 0.42, "layer": 0.47}, ema=0.25))
    res = C.claim_completion(inp)
    assert res.status == SUPPORTED
    ln = [score(r, "completion_accuracy") for r in inp.runs if r.norm == "layer"]
    assert f"LN-LSTM {100 * sum(ln) / len(ln):.1f}%" in res.key_number
    assert "chance 20%" in res.key_number
    assert "120 questions" in res.key_number
    assert "no number is given" in res.notes[0] and "Python 3.11.7" in res.notes[1]
    bn = next(r for r in res.table if r["model"] == "BN-LSTM")
    assert "[population statistics]" in bn["completion accuracy % (mean of last 3)"]
    assert bn["EMA completion accuracy %"].startswith("25.0")
    assert any("population statistics recomputed" in c and "`ema_completion_accuracy`" in c
               for c in res.caveats)
    worse = _inputs(_completion_runs({"none": 0.40, "batch": 0.50, "layer": 0.47}))
    res = C.claim_completion(worse)
    assert res.status == NOT_SUPPORTED
    assert any("EMA) is not recorded for this measure" in c for c in res.caveats)
    assert "EMA completion accuracy %" not in res.table[1]
    mixed = _completion_runs({"none": 0.40, "batch": 0.42, "layer": 0.47})
    for r in mixed[:5]:                                  # the LSTM arm: another Python's test
        for row in r.rows:
            row["completion_sha256"] = "cd" * 32
    res = C.claim_completion(_inputs(mixed))
    assert res.status == "not run" and "different completion test sets" in res.verdict.detail
    old = _inputs(_arms("paper_charlm", "test_loss", {"none": 2.4, "batch": 2.25, "layer": 2.15}))
    res = C.claim_completion(old)
    assert res.status == "not run" and "`completion_accuracy`" in res.verdict.detail


def test_charlm_bn_is_scored_with_population_statistics_when_carried():
    runs = _completion_runs({"none": 0.40, "batch": 0.42, "layer": 0.47})
    for r in runs:                           # BN's EMA loss is poor, its population loss best
        if r.norm == "batch":
            for row in r.rows:
                row["eval_test_loss"] = row["test_loss"] - 0.2
    lower = claim_loss_lower(CHARLM_SPEC, BPC_MARGIN, ("none", "batch"))
    res = lower(_inputs(runs))
    assert res.status == NOT_SUPPORTED                   # BN-LSTM (population) beats LN-LSTM
    bn = next(r for r in res.table if r["model"] == "BN-LSTM")
    assert "[population statistics]" in bn["test bits per character (mean of last 3)"]
    assert "EMA" in bn
    for r in runs:                           # without bn_scoring: the EMA score, as before
        for row in r.rows:
            row.pop("bn_scoring", None)
    assert lower(_inputs(runs)).status == SUPPORTED


def _reader_runs(ends, task="cloze", pop=None):
    runs = [_run("paper_reader", n, s, _curve(0.8, e, jitter=0.002 * s), "test_error",
                 dataset=task) for n, e in ends.items() for s in SEEDS]
    for r in runs:
        for row in r.rows:
            row["test_error"] = row["train_loss"]
            if r.norm == "batch" and pop is not None:
                row |= {"bn_scoring": "population", "pop_sample": 1000,
                        "eval_test_error": pop, "eval_test_loss": 1.0}
    return runs


def test_reader_bn_with_population_statistics_beside_ema():
    ema_only = _inputs(_reader_runs({"none": 0.15, "batch": 0.7, "layer": 0.05}))
    res = C.claim_reader(C.claim_rnn_best)(ema_only)
    # EMA only: the BN line of every claim says so; nothing measured elsewhere is added
    assert res.status == SUPPORTED
    assert any(c.startswith("Batch norm scored with its running averages") for c in res.caveats)
    assert not any("BN-LSTM on the reader" in c for c in res.caveats)
    pop = _inputs(_reader_runs({"none": 0.15, "batch": 0.7, "layer": 0.05}, pop=0.02))
    res = C.claim_reader(C.claim_rnn_best)(pop)
    assert res.status == NOT_SUPPORTED                   # BN-LSTM at 2% with population stats
    note = res.caveats[-1]
    assert note.startswith("BN-LSTM on the reader is scored with population statistics")
    assert "1000 training passages" in note and "2.0% test error" in note and "EMA" in note
    assert "EMA test error %" in res.table[1] and res.table[1]["model"] == "BN-LSTM"


def test_full_forms_judged_apart_when_their_runs_exist():
    emb = _arms("paper_draw", "test_loss", {"none": 22.0, "layer": 21.0}, dataset="digits-binary")
    mnist = draw_on_mnist({"none": 82.4, "layer": 82.5}, {"none": 95.0, "layer": 95.0})
    inp = _inputs(emb + mnist + _reader_runs({"none": 0.15, "batch": 0.7, "layer": 0.05}))
    assert C.full_forms_run(inp) == ("paper_draw",)
    results = {c.id: res for c, res in judge(inp)}
    assert results["6.4-draw-bound"].status == SUPPORTED          # embedded runs only
    assert "8x8 binarized digits" in results["6.4-draw-bound"].notes[0]
    full = results["6.4-draw-bound-mnist"]
    assert full.status == NOT_SUPPORTED and "LN-LSTM 82.5" in full.key_number   # MNIST runs
    assert "Salakhutdinov & Murray" in full.notes[0]
    assert "6.2-reader-best-cnn" not in results and "6.4-draw-fast-mnist" in results
    md = render(inp, judge(inp), {})
    assert "`paper_reader on cnn-questions (full form)`" in md
    assert "`paper_draw on mnist (full form)`" not in md
    assert "## 6.4 DRAW on MNIST, dynamically binarized (full form)" in md
    cnn = _inputs(_reader_runs({"none": 0.3, "batch": 0.5, "layer": 0.2}, task="cnn-questions"))
    res = {c.id: r for c, r in judge(cnn)}["6.2-reader-best-cnn"]
    assert res.status == SUPPORTED and "DeepMind Q&A" in res.notes[0]


def test_completion_figure_is_drawn(tmp_path):
    for r in _completion_runs({"none": 0.40, "batch": 0.42, "layer": 0.47}, ema=0.25):
        d = tmp_path / "runs" / "paper_charlm" / f"{r.norm}-{r.seed}"
        d.mkdir(parents=True)
        (d / "config.json").write_text(json.dumps(r.config))
        (d / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in r.rows))
        (d / "done").write_text("")
    build_report(tmp_path)
    s = {r["claim"]: r["verdict"] for r in json.loads((tmp_path / "summary.json").read_text())}
    assert s["charlm-completion"] == SUPPORTED
    assert (tmp_path / "figures" / "paper_charlm_completion.png").stat().st_size > 1000
    assert (tmp_path / "figures" / "paper_charlm_curves.png").stat().st_size > 1000


def test_not_run_lists_the_papers_data_no_preset_downloads(tmp_path):
    inp = _inputs([])
    inp.not_downloaded = {"paper_handwriting": "IAM-OnDB is for registered users only"}
    md = render(inp, judge(inp, paper_claims()), {})
    assert "- `paper_handwriting on the paper's data`: IAM-OnDB is for registered users" in md
    from layernorm_paper.records import not_downloaded   # the reproduction's own list
    NOT_DOWNLOADED = not_downloaded()
    (tmp_path / "reproduce.json").write_text("{}")
    from layernorm_paper.report.runs import read_inputs
    assert read_inputs(tmp_path).not_downloaded == NOT_DOWNLOADED

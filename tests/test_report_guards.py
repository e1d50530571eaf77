"""Every claim through the guards: the stability claim refuses a plain LSTM that never learned
the adding problem, a seeded claim that skips the learning guard cannot return a verdict, and a
claim whose arms all sit at the best possible score is "not testable here"."""
import json

import pytest

from layernorm_paper import report as R
from layernorm_paper.report import claims as C
from layernorm_paper.report.claims.base import GuardSkipped
from layernorm_paper.verdicts import (CEILING, LEARNED, NO_LEARNING, NOT_SUPPORTED, SUPPORTED,
                                      Verdict)

from .test_report import CURVES, rnn_rows, write_rnn, write_run


def _results(root) -> dict:
    inp = R.read_inputs(root)
    return {c.id: r for c, r in C.judge(inp)}


def _set_mse(root, exp: str, norm: str, mse: float) -> None:
    for d in (root / "runs" / exp).iterdir():
        if json.loads((d / "config.json").read_text())["norm"] == norm:
            rows = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
            (d / "metrics.jsonl").write_text("".join(json.dumps(r | {"test_mse": mse}) + "\n"
                                                     for r in rows))


def test_stability_claim_refuses_a_plain_lstm_that_did_not_learn(tmp_path):
    # T = 120: the hidden-state statistics say LN-LSTM is more stable (supported) ...
    write_rnn(tmp_path, "rnn_stability", "adding", 120, CURVES, dataset="adding")
    res = _results(tmp_path)["rnn-hidden-adding"]
    assert res.verdict.verdict == SUPPORTED and LEARNED in res.verdict.guards
    # ... until the LSTM's test MSE sits at the constant predictor's 1/6: it never learned the
    # task, so its hidden state says nothing about a trained LSTM's
    _set_mse(tmp_path, "rnn_stability", "none", 0.169)
    res = _results(tmp_path)["rnn-hidden-adding"]
    assert res.verdict.verdict == NO_LEARNING
    assert "LSTM: `test_mse` 0.169" in res.verdict.detail and "0/5 runs learned" in \
        res.verdict.detail
    assert res.verdict.parts[0].verdict == SUPPORTED      # the rule's own verdict, not counted
    # the LN-LSTM alone at 1/6 is refused as well
    _set_mse(tmp_path, "rnn_stability", "none", 0.01)
    _set_mse(tmp_path, "rnn_stability", "layer", 0.17)
    assert _results(tmp_path)["rnn-hidden-adding"].verdict.verdict == NO_LEARNING


def test_a_seeded_claim_without_the_learning_guard_cannot_return_a_verdict():
    bare = C.ClaimResult(Verdict(NOT_SUPPORTED, "a rule", "numbers"), "key", [])
    claim = C.Claim("x-unguarded", "paper 0", "a claim", "exp", lambda inp: bare)
    with pytest.raises(GuardSkipped, match="x-unguarded.*baseline did not learn"):
        claim.evaluate(None)
    # "not run" needs no guard, nor does a deterministic check
    assert not C.Claim("x-not-run", "paper 0", "a claim", "exp",
                       lambda inp: C.not_run("no runs")).evaluate(None).measured
    check = C.Claim("x-check", "paper 0", "a check", "exp", lambda inp: bare, kind=C.CHECK)
    assert check.evaluate(None) is bare


def test_every_seeded_claim_of_the_catalog_is_guarded():
    # every seeded catalog line wraps its rule in the guard check (a new record's claim too)
    claims = C.claims_for_tasks([("rnn_norms", "adding"), ("rnn_downloads", "imdb")],
                                full_forms=tuple(C.FULL_FORMS))
    seeded = [c for c in claims if c.kind == C.CLAIM]
    assert len(seeded) > 20
    assert all(getattr(c.evaluate, "guarded", False) for c in seeded), \
        [c.id for c in seeded if not getattr(c.evaluate, "guarded", False)]


def test_every_arm_at_ceiling_is_not_testable_here(tmp_path):
    # every arm at 0 test error: "LN-LSTM reaches the best accuracy" cannot be told apart from
    # its negation on this task (without the guard the rule says "not supported")
    for norm, first in (("none", 0.8), ("batch", 0.6), ("layer", 0.5)):
        for seed in range(5):
            cfg = {"experiment": "rnn_norms", "task": "digits-pixels", "dataset": "digits-pixels",
                   "norm": norm, "batch_size": 32, "seed": seed, "steps": 200,
                   "model": "rnn_classifier", "model_args": {"hidden": 48}, "data_args": {}}
            errs = [first + 0.01 * seed, 0.2, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
            write_run(tmp_path, f"rnn_norms/digits-pixels-{norm}-{seed}", cfg,
                      rnn_rows(errs, [[0.0, 0.3]] * len(errs)))
    res = _results(tmp_path)["rnn-best-digits-pixels"]
    assert res.verdict.verdict == CEILING
    assert res.verdict.parts[0].verdict == NOT_SUPPORTED
    assert "every arm at ceiling" in res.verdict.detail
    # the speed claim is still judged: the arms reach the ceiling at different times or not
    assert _results(tmp_path)["rnn-fast-digits-pixels"].verdict.verdict != CEILING


def test_a_count_met_at_the_first_evaluation_is_flagged_left_censored(tmp_path):
    # BN-LSTM's error is already under the counted target (22.5%: the uniform guess's 90%
    # bettered by 75%, the strictest of the fixed grid every LN-LSTM run reaches) at its first
    # evaluation: its step count is an upper bound, it cannot count as fast
    curves = {**CURVES, "batch": [0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2]}
    write_rnn(tmp_path, "rnn_norms", "mnist1d-seq", 10, curves)
    res = _results(tmp_path)["rnn-fast-mnist1d-seq"]
    bn = next(p for p in res.verdict.parts if p.rule.startswith("BN-LSTM steps"))
    assert "≤ 22.5%" in res.verdict.rule
    assert "met it at the first evaluation (left-censored: the count is an upper bound): " \
           "BN-LSTM steps 5/5, LN-LSTM steps 0/5" in bn.detail
    # ... and the grid's note flags it at every target
    grid = next(n for n in res.notes if n.startswith("The rule at every target"))
    assert "75% (22.5%) [counted]:" in grid and "BN-LSTM 5/5 (5 at the first evaluation)" in grid

"""Guard (a)'s trivial predictors of the language model (unigram), handwriting (one Gaussian and
the pen-up rate) and retrieval (chance recall): values checked by hand, and claims on hand-made
runs whose arm does not beat them -> "baseline did not learn"."""
from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from layernorm_paper.data import Dataset, load_dataset
from layernorm_paper.report.claims import (BPC_MARGIN, CHARLM_SPEC, claim_hw_no_worse,
                                           claim_loss_lower, claim_order_recall,
                                           claim_order_sooner)
from layernorm_paper.report.claims import guards as G
from layernorm_paper.report.runs import Inputs, Run
from layernorm_paper.verdicts import NO_LEARNING

from .test_report_order import order_runs
from .test_report_paper import SEEDS, _curve, _run

ROOT = Path(__file__).resolve().parents[1]
LM_ARGS = {"seq_len": 16, "max_chars": 20_000, "limit_train": 64, "limit_test": 16}
HW_ARGS = {"length": 12, "n_train": 16, "n_test": 8}


def _inputs(runs):
    return Inputs(out=Path("/nowhere"), runs=runs)


def test_unigram_by_hand():
    # training targets 0, 0, 1 over 3 ids: add-one counts 3, 2, 1 of 6; test targets 1, 2 (and a
    # step not scored)
    z = torch.zeros(1, 3)
    ds = Dataset("lm", "classify", z, torch.tensor([[0, 0, 1]]), z, torch.tensor([[1, 2, -100]]),
                 num_classes=3, vocab_size=3)
    assert math.isclose(G.unigram_nats(ds), -(math.log(2 / 6) + math.log(1 / 6)) / 2)


def test_gaussian_pen_model_by_hand():
    from scipy.stats import multivariate_normal
    rng = np.random.default_rng(0)
    x = rng.normal(size=(6, 5, 3))
    x[..., 2] = rng.random((6, 5)) < 0.3
    x[0, 1, 2], x[0, 2, 2] = 1, 0                   # both pen states among the scored points
    xt = torch.from_numpy(x.astype(np.float32))
    ds = Dataset("pen", "regress", xt[:4], torch.zeros(4), xt[4:], torch.zeros(2))
    tr = x[:4, 1:].reshape(-1, 3)                   # the scored points: 1..T-1
    te = x[4:, 1:].reshape(-1, 3)
    mu, cov = tr[:, :2].mean(0), np.cov(tr[:, :2].T, bias=True)
    p = tr[:, 2].mean()
    want = np.mean(-multivariate_normal(mu, cov).logpdf(te[:, :2])
                   - np.where(te[:, 2] == 1, np.log(p), np.log(1 - p)))
    assert math.isclose(G.gaussian_pen_nats(ds), want, rel_tol=1e-4)
    assert math.isclose(G.gaussian_pen_nats(ds, probe=1),
                        np.mean(-multivariate_normal(mu, cov).logpdf(x[4, 1:, :2])
                                - np.where(x[4, 1:, 2] == 1, np.log(p), np.log(1 - p))),
                        rel_tol=1e-4)


def _order_run(key, value, images=300, per_image=5):
    return Run(Path("/nowhere/o"), {"dataset": "digit-captions"},
               [{"step": 1, key: value, "val_images": images, "test_images": images,
                 "captions_per_image": per_image}])


def test_retrieval_chance_by_hand():
    assert math.isclose(G.trivial(_order_run("val_c2i_r10", 1.0), "val_c2i_r10")[0], 100 * 10 / 300)
    assert math.isclose(G.trivial(_order_run("val_c2i_rsum", 1.0), "val_c2i_rsum")[0],
                        100 * 16 / 300)
    # 3 images x 2 captions: one of an image's 2 captions first among 6 at random: 2/6; among 2:
    # 1 - (4/6)(3/5)
    run = _order_run("test_i2c_r1", 1.0, images=3, per_image=2)
    assert math.isclose(G.trivial(run, "test_i2c_r1")[0], 100 * 2 / 6)
    assert math.isclose(G.recall_chance(run, "test_i2c_r2")[0], 100 * (1 - 4 / 6 * 3 / 5))
    mean = G.recall_chance(run, "test_r_mean")[0]   # c2i R@1, R@10 (all 3), i2c R@1, R@10 (all 6)
    assert math.isclose(mean, 100 * (1 / 3 + 1 + 2 / 6 + 1) / 4)
    assert G.higher_is_better("val_c2i_rsum") and not G.higher_is_better("test_loss")
    no_sizes = Run(Path("/nowhere/o"), {"dataset": "digit-captions"}, [{"val_c2i_rsum": 5.0}])
    assert G.trivial(no_sizes, "val_c2i_rsum") is None


def test_the_data_dependent_scores_are_the_run_data_and_the_names_match_the_runner():
    lm = _run("paper_charlm", "none", 0, [2.0], "test_loss", dataset="docstrings")
    lm.config["data_args"] = dict(LM_ARGS)
    t, what = G.trivial(lm, "test_loss")
    ds = load_dataset("docstrings", **LM_ARGS)
    assert t == G.unigram_nats(ds) and "unigram" in what
    assert 0 < t < math.log(ds.num_classes)         # better than the uniform guess
    hw = _run("paper_handwriting", "none", 0, [2.0], "test_nll_per_point", dataset="pen-strokes")
    hw.config["data_args"] = dict(HW_ARGS)
    assert G.trivial(hw, "test_nll_per_point")[0] == \
        G.gaussian_pen_nats(load_dataset("pen-strokes", **HW_ARGS))
    from layernorm_paper.report.claims.losses import F_NLL_POINT
    assert G.HW_NLL_POINT == F_NLL_POINT
    import inspect
    from layernorm_paper.experiments.training import _extra_metrics
    assert inspect.signature(_extra_metrics).parameters["probe"].default == G.HW_PROBE


def test_charlm_arm_no_better_than_the_unigram_did_not_learn():
    t = G.trivial(Run(Path("/x"), {"dataset": "docstrings", "data_args": LM_ARGS}, []),
                  "test_loss")[0]
    ends = {"none": 0.95 * t, "batch": 0.7 * t, "layer": 0.65 * t}   # the LSTM within 10%

    def runs(e):
        out = [_run("paper_charlm", n, s, _curve(1.2 * t, v, jitter=0.001 * s), "test_loss",
                    dataset="docstrings") for n, v in e.items() for s in SEEDS]
        for r in out:
            r.config["data_args"] = dict(LM_ARGS)
        return _inputs(out)
    lower = claim_loss_lower(CHARLM_SPEC, BPC_MARGIN, ("none", "batch"))
    res = lower(runs(ends))
    assert res.status == NO_LEARNING
    assert "LSTM: `test_loss`" in res.verdict.detail and "unigram" in res.verdict.detail
    assert lower(runs({**ends, "none": 0.8 * t})).status != NO_LEARNING


def test_handwriting_arm_no_better_than_one_gaussian_did_not_learn():
    t = G.trivial(Run(Path("/x"), {"dataset": "pen-strokes", "data_args": HW_ARGS}, []),
                  G.HW_NLL_POINT)[0]

    def runs(lstm_end):
        out = []
        for n, end in (("none", lstm_end), ("layer", lstm_end)):
            for s in SEEDS:
                r = _run("paper_handwriting", n, s, _curve(t + 1, end, jitter=0.001 * s),
                         "test_nll_per_point", {"test_nll": 99.0, "test_loss": 1e3},
                         dataset="pen-strokes")
                r.config["data_args"] = dict(HW_ARGS)
                out.append(r)
        return _inputs(out)
    res = claim_hw_no_worse(runs(0.95 * t))
    assert res.status == NO_LEARNING and "one Gaussian" in res.verdict.detail
    assert claim_hw_no_worse(runs(0.5 * t)).status != NO_LEARNING


def test_retrieval_arm_at_chance_did_not_learn():
    def runs(gru_rsum_scale):
        out = order_runs({"none": (300, 30.0), "layer": (200, 33.0)})
        for r in out:
            for row in r.rows:
                row["val_images"] = 300                 # chance R-sum 16/300 = 5.33 %
                if r.norm == "none":
                    row["val_c2i_rsum"] *= gru_rsum_scale
        return _inputs(out)
    at_chance = runs(5.5 / 150)                         # GRU's R-sum ends near 5.5 < 5.87
    for claim in (claim_order_recall, claim_order_sooner):
        res = claim(at_chance)
        assert res.status == NO_LEARNING, claim.__name__
        assert "GRU: `val_c2i_rsum`" in res.verdict.detail and "needs ≥ 5.867" in \
            res.verdict.detail
        assert claim(runs(1.0)).status != NO_LEARNING


def test_computing_the_trivial_scores_loads_no_training_code():
    code = ("import sys; from pathlib import Path; "
            "from layernorm_paper.report.runs import Run; "
            "from layernorm_paper.report.claims.guards import trivial; "
            f"lm = Run(Path('/x'), {{'dataset': 'docstrings', 'data_args': {LM_ARGS!r}}}, []); "
            f"hw = Run(Path('/x'), {{'dataset': 'pen-strokes', 'data_args': {HW_ARGS!r}}}, []); "
            "assert trivial(lm, 'test_loss') and trivial(hw, 'test_nll_per_point'); "
            "bad = [m for m in sys.modules if m.startswith(('layernorm_paper.experiments', "
            "'layernorm_paper.reproduce', 'layernorm_paper.distributed'))]; "
            "print(bad); sys.exit(1 if bad else 0)")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr

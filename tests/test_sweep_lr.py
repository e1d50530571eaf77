"""``layernorm sweep-lr``: a tiny sweep over 2 learning rates chooses the validation-best value,
never reads the test split, and the records' configs pick up what it wrote."""
from __future__ import annotations

import json
import math

import pytest
import torch

import layernorm_paper.reproduce  # noqa: F401  registers the experiments
from layernorm_paper import records
from layernorm_paper.data import registry as data_registry
from layernorm_paper.experiments import get_experiment
from layernorm_paper.experiments.holdout import HOLDOUT, VALIDATION, validation_view
from layernorm_paper.records import _record
from layernorm_paper.reproduce import sweep_lr

EXPERIMENT, DATASET = "paper_handwriting", "pen-strokes"


class _TestSplit:
    """Stands in for a test split that must not be read: any use raises."""

    def _read(self, *args, **kwargs):
        raise AssertionError("the sweep read the test split")

    __getitem__ = __len__ = __iter__ = _read

    def __getattr__(self, name):
        self._read()


@pytest.fixture
def guarded_test_split(monkeypatch):
    """The dataset's loader with its test tensors replaced by ``_TestSplit``."""
    entry = data_registry.DATASETS[DATASET]

    def load(**kwargs):
        ds = entry.fn(**kwargs)
        ds.x_test, ds.y_test, ds.lengths_test = _TestSplit(), _TestSplit(), _TestSplit()
        return ds
    load.__wrapped__ = entry.fn.__wrapped__
    monkeypatch.setitem(data_registry.DATASETS, DATASET,
                        data_registry._Entry(load, entry.description, entry.embedded))


def test_validation_view_carves_from_training_only(guarded_test_split):
    ds = data_registry.load_dataset(DATASET, length=12, n_train=20, n_test=8)
    train = ds.x_train.clone()
    view = validation_view(ds)
    assert len(view.x_test) == 4 and len(view.x_train) == 16     # a fifth held apart
    rows = {tuple(r.flatten().tolist()) for r in train}
    held = [tuple(r.flatten().tolist()) for r in view.x_test]
    kept = [tuple(r.flatten().tolist()) for r in view.x_train]
    assert set(held) <= rows and set(kept) <= rows and not set(held) & set(kept)
    assert view.info[HOLDOUT]["evaluated_on"] == VALIDATION
    again = validation_view(data_registry.load_dataset(DATASET, length=12, n_train=20, n_test=8))
    assert torch.equal(again.x_test, view.x_test)          # the same rows every time


def test_tiny_sweep_chooses_the_validation_best(tmp_path, monkeypatch, guarded_test_split):
    path = tmp_path / "learning_rates.json"
    done = sweep_lr.sweep([EXPERIMENT], tier="tiny", values=[1e-3, 3e-2], out=tmp_path / "sweep",
                          json_path=path, jobs=1, log=lambda *a: None)
    entry = json.loads(path.read_text())["scales"]["tiny"][EXPERIMENT]
    assert entry == json.loads(json.dumps(done[EXPERIMENT]))
    assert set(entry["arms"]) == {"layer-bs8", "none-bs8"}
    assert entry["seeds"] == [0] and entry["command"].startswith("layernorm sweep-lr")
    for arm, e in entry["arms"].items():
        assert e["grid"] == [1e-3, 3e-2] and e["current"] == 1e-3
        # each score recomputed from its run: the mean of the last 3 validation NLLs per point
        for lr, score in e["scores"].items():
            run = tmp_path / "sweep" / "runs" / EXPERIMENT / f"lr{float(lr):.3g}-{arm}-seed0"
            config = json.loads((run / "config.json").read_text())
            assert config["data_args"][HOLDOUT] == VALIDATION and config["lr"] == float(lr)
            rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
            vals = [r["test_nll_per_point"] for r in rows][-3:]
            assert math.isclose(score, sum(vals) / len(vals), rel_tol=1e-12)
        best = min(e["scores"], key=e["scores"].get)
        assert e["chosen"] == float(best)

    # the records' configs read the chosen value of their arm; others keep the record's
    monkeypatch.setattr(_record, "LEARNING_RATES", path)
    configs = get_experiment(EXPERIMENT).configs("tiny")
    for c in configs:
        assert c.lr == entry["arms"][records.arm_name(c.run_name())]["chosen"]
    assert all(c.lr == 1e-3 for c in records.RECORDS[EXPERIMENT].configs("tiny"))
    quick = get_experiment("paper_draw").configs("tiny")         # not in the file
    assert all(c.lr == 1e-3 for c in quick)


def test_ties_go_to_the_record_value_and_bad_holdout_is_refused():
    assert sweep_lr._choose({1e-3: 0.5, 3e-3: 0.5, 1e-2: 0.7}, "min", 3e-3) == 3e-3
    assert sweep_lr._choose({1e-3: 0.5, 3e-3: 0.4}, "max", 3e-3) == 1e-3
    from layernorm_paper.experiments.config import Config
    from layernorm_paper.experiments.holdout import load_for
    with pytest.raises(ValueError, match="holdout"):
        load_for(Config(dataset="digits", data_args={HOLDOUT: "test"}, steps=1))


def test_settings_line_says_which_arms_were_swept():
    from pathlib import Path

    from layernorm_paper.report.claims.base import learning_rates_text
    from layernorm_paper.report.runs import Run

    def run(name, lr):
        return Run(Path("runs") / EXPERIMENT / name, {"lr": lr}, [])
    swept = {"layer-bs8": {"chosen": 9e-3, "grid": [1e-3, 3e-3, 9e-3],
                           "command": "layernorm sweep-lr --only paper_handwriting"}}
    arms = {"LN-LSTM": [run("layer-bs8-seed0", 9e-3), run("layer-bs8-seed1", 9e-3)],
            "LSTM": [run("none-bs8-seed0", 1e-3)]}
    text = learning_rates_text(arms, swept)
    assert ("lr 0.009 for LN-LSTM (chosen on a validation split among 0.001/0.003/0.009 by "
            "`layernorm sweep-lr --only paper_handwriting`)") in text
    assert "lr 0.001 for LSTM (not swept)" in text
    # a run whose lr is not the sweep's choice (trained before the sweep) is not called swept
    arms["LN-LSTM"][1] = run("layer-bs8-seed1", 1e-3)
    assert "LN-LSTM (not swept)" in learning_rates_text(arms, swept)


def _fake_sweep(tmp_path, monkeypatch, widen: int, seeds: int = 3):
    """The sweep's logic on a fake: no training; each run's validation score is a bowl in
    log10(lr) with its minimum at 0.1, far above the default grid (1/3, 1, 3 x 1e-3), plus a
    per-seed offset (the seed-to-seed spread)."""
    import re

    from layernorm_paper.experiments import runner
    monkeypatch.setattr(runner, "run_configs", lambda configs, *a, **k: [])

    def score(run_dir, experiment):
        m = re.match(r"lr([0-9.e-]+)-.*-seed(\d+)$", run_dir.name)
        lr, seed = float(m.group(1)), int(m.group(2))
        return (math.log10(lr) + 1.0) ** 2 + 0.001 * seed
    monkeypatch.setattr(sweep_lr, "run_score", score)
    path = tmp_path / f"lr-{widen}.json"
    done = sweep_lr.sweep([EXPERIMENT], tier="tiny", seeds=seeds, widen=widen,
                          out=tmp_path / "sweep", json_path=path, log=lambda *a: None)
    return done[EXPERIMENT]


def test_widening_until_the_pick_is_interior(tmp_path, monkeypatch):
    entry = _fake_sweep(tmp_path, monkeypatch, widen=5)
    assert "--seeds 3" in entry["command"] and entry["seeds"] == [0]   # tiny runs one seed
    for e in entry["arms"].values():
        # 3e-3 at the grid's top edge: 9e-3, 0.027, 0.081, 0.243 tried; 0.081 wins, inside
        assert e["extended"] == [0.009, 0.027, 0.081, 0.243]
        assert e["chosen"] == 0.081 and e["where"] == "interior"
    # two widenings are not enough: the pick stays at the top edge, and the entry says so
    short = _fake_sweep(tmp_path, monkeypatch, widen=2)
    for e in short["arms"].values():
        assert e["extended"] == [0.009, 0.027] and e["where"] == "edge (highest)"
    # no widening: the grid only
    none = _fake_sweep(tmp_path, monkeypatch, widen=0)
    assert all(e["extended"] == [] and e["chosen"] == 0.003 for e in none["arms"].values())


def test_the_pick_is_shown_against_the_seed_to_seed_spread(tmp_path, monkeypatch):
    from layernorm_paper.report.rates import lr_pick
    e = {"grid": [1e-3, 3e-3, 9e-3], "chosen": 3e-3, "extended": [9e-3],
         "scores": {"0.001": 0.30, "0.003": 0.20, "0.009": 0.21},
         "scores_per_seed": {"0.001": [0.29, 0.30, 0.31], "0.003": [0.15, 0.20, 0.25],
                             "0.009": [0.20, 0.21, 0.22]}}
    row = lr_pick(e)
    assert row["where"] == "interior (widened by 1)" and row["seeds"] == 3
    # won by 0.01 against a seed-to-seed standard deviation of 0.023 on average: less than it
    assert row["winning margin"] == "0.01" and \
        row["vs seed-to-seed"] == "0.43× the seed spread 0.0233"
    assert sweep_lr.beyond_edge({1e-3: [0.3], 3e-3: [0.2]}, "min", 1e-3) == 0.009
    assert sweep_lr.beyond_edge({1e-3: [0.3], 3e-3: [0.2], 9e-3: [0.25]}, "min", 1e-3) is None
    assert sweep_lr.beyond_edge({1e-3: [0.1], 3e-3: [0.2]}, "min", 1e-3) == 0.000333


def test_a_new_record_is_all_a_swept_experiment_needs(tmp_path, monkeypatch):
    """A record built here, with its ``Sweep`` and ``paper_experiment`` fields, and nothing else
    edited: the sweep lists it (at its rank), builds its arms' configs, scores its runs on its
    metric in its direction, and the report's section 6 list includes it."""
    from dataclasses import replace

    from layernorm_paper.report.claims import paper_claims

    def configs(scale):
        return [_record.config(dataset="digits", model="mlp", norm=norm, batch_size=8, seed=s,
                               lr=2e-3, steps=2, eval_every=1, model_args={"hidden": [8]})
                for norm in ("none", "layer") for s in (0, 1)]
    listed = object()
    new = records.Record("toy_swept", section="6.6", claim="a toy", tier=records.QUICK,
                         configs=configs, claims=lambda found, rules: [listed],
                         sweep=records.Sweep(rank=0, metric="test_loss", direction="max",
                                             scored_on="the best validation loss"),
                         paper_experiment=True)
    monkeypatch.setitem(records.RECORDS, new.name, new)

    assert sweep_lr.default_experiments()[0] == "toy_swept"        # rank 0: swept first
    runs, arms = sweep_lr.sweep_configs("toy_swept", "tiny", seeds=1, values=None,
                                        factors=sweep_lr.FACTORS)
    assert set(arms) == {"none-bs8", "layer-bs8"} and len(runs) == 2 * 3
    assert arms["layer-bs8"]["grid"] == [0.000667, 0.002, 0.006]
    run = tmp_path / "run"
    run.mkdir()
    rows = [{"step": i, "test_error": 0.5, "test_loss": v} for i, v in enumerate((1, 4, 2, 3))]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert sweep_lr.run_score(run, "toy_swept") == 4.0        # "max": its best evaluation
    monkeypatch.setitem(records.RECORDS, new.name,
                        replace(new, sweep=records.Sweep(0, "test_loss")))
    assert sweep_lr.run_score(run, "toy_swept") == 3.0        # "min": mean of the last 3
    assert listed in paper_claims()

    with pytest.raises(ValueError, match="direction"):
        records.Sweep(1, direction="lower")
    with pytest.raises(ValueError, match="Use tier='embedded'"):     # a former name
        replace(new, tier="standard")
    with pytest.raises(TypeError, match="Sweep"):
        replace(new, sweep={"metric": "test_loss"})
    with pytest.raises(ValueError, match="not swept"):
        sweep_lr.run_score(run, "analysis")

"""The adaptive seed budget (``report.seeds``): borderline claims first, then straddling ones,
one more seed per arm at a time, never past the budget; the reproduce command's option."""
import pytest

from layernorm_paper.records._record import config
from layernorm_paper.report import seeds
from layernorm_paper.report.claims import Claim, ClaimResult
from layernorm_paper.verdicts import STRADDLE, exceeds, sample

SEEDS = tuple(range(5))
ZERO = sample([0.0] * 5, SEEDS)


def _result(cid, experiment, values):
    v = exceeds(sample(values, SEEDS), ZERO, 0.5)
    return Claim(cid, "paper 6.5", "a claim", experiment, None), ClaimResult(v, "k", [])


def _configs(experiment, dataset):
    return [config(experiment=experiment, dataset=dataset, model="mlp", norm=n, seed=s,
                   steps=10, data_args={"split_seed": s}) for n in ("none", "layer")
            for s in SEEDS]


RESULTS = [_result("far", "mlp_batch_size", [3.0, 3.1, 2.9, 3.0, 3.0]),
           _result("straddle", "lstm_gain_init", [0.45, 0.55, 0.5, 0.52, 0.48]),
           _result("near", "paper_handwriting", [1.0, 1.2, 0.8, 1.1, 2.0])]
CONFIGS = (_configs("mlp_batch_size", "digits") + _configs("lstm_gain_init", "mnist1d-seq")
           + _configs("paper_handwriting", "strokes"))


def test_borderline_claims_get_extra_seeds_first_within_the_budget():
    assert RESULTS[1][1].verdict.reason == STRADDLE
    assert [c.id for c in seeds.priority(RESULTS)] == ["near", "straddle"]
    # 2 arms per claim: a budget of 3 runs buys one seed, for the borderline claim only
    more, given = seeds.plan(RESULTS, CONFIGS, 3)
    assert given == [{"claim": "near", "seeds": [5]}]
    assert sorted((c.experiment, c.norm, c.seed, c.data_args["split_seed"]) for c in more) == \
        [("paper_handwriting", "layer", 5, 5), ("paper_handwriting", "none", 5, 5)]
    # 6 runs: one round over both claims, then one more seed for the borderline claim
    more, given = seeds.plan(RESULTS, CONFIGS, 6)
    assert given == [{"claim": "near", "seeds": [5, 6]}, {"claim": "straddle", "seeds": [5]}]
    assert len(more) == 6 and "far" not in str(given)
    assert seeds.plan(RESULTS, CONFIGS, 0) == ([], [])
    with pytest.raises(ValueError, match="integer >= 0"):
        seeds.plan(RESULTS, CONFIGS, -1)


def test_reproduce_states_the_extra_seed_option():
    import argparse

    from layernorm_paper.reproduce.command import add_commands
    p = argparse.ArgumentParser()
    add_commands(p.add_subparsers())
    assert p.parse_args(["reproduce", "--extra-seeds", "20"]).extra_seeds == 20
    assert p.parse_args(["reproduce"]).extra_seeds == 0


def test_a_seed_offset_moves_every_training_run_to_other_seeds(tmp_path, monkeypatch):
    """``--seed-offset K``: the same tier on the seeds K, K + 1, ... (a seeded test split
    follows its seed), stated in reproduce.json."""
    import json

    from layernorm_paper.experiments import runner
    from layernorm_paper.reproduce.command import add_commands, reproduce
    seen = []
    monkeypatch.setattr(runner, "run_configs", lambda configs, out, **kw: seen.extend(configs)
                        or [])
    reproduce("tiny", tmp_path / "a", only=["mlp_batch_size"], report=False, log=lambda *a: None)
    reproduce("tiny", tmp_path / "b", only=["mlp_batch_size"], report=False, log=lambda *a: None,
              seed_offset=100)
    base, moved = seen[:len(seen) // 2], seen[len(seen) // 2:]
    assert base and [c.seed + 100 for c in base] == [c.seed for c in moved]
    assert all(c.data_args.get("split_seed") in (None, c.seed) for c in moved)
    assert json.loads((tmp_path / "b" / "reproduce.json").read_text())["seed_offset"] == 100
    import argparse
    p = argparse.ArgumentParser()
    add_commands(p.add_subparsers())
    assert p.parse_args(["reproduce", "--seed-offset", "5"]).seed_offset == 5

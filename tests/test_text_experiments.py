"""Summary B's text experiments in the default tier and paper 3.1's gradient growth: the novels
LM's completion claim (the docstrings' rule on the novels' runs), the IMDb runs' hidden-state
and gradient-growth claims, the growth measurement of ``layernorm reproduce``, and the tier
paper with --device. Every run here is written by hand or trained for a few steps on embedded
data; no network."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from layernorm_paper import records
from layernorm_paper.report.claims import rules as R
from layernorm_paper.report.claims.growth import FLOAT64_DECADES, decades
from layernorm_paper.report.runs import Inputs, load_runs
from layernorm_paper.verdicts import NO_LEARNING, NOT_SUPPORTED, SUPPORTED

from .test_report import rnn_rows, write_run
from .test_report_paper import _arms, _curve


def _claims(name: str) -> dict:
    return {c.id: c for c in records.RECORDS[name].claims(records.Found(), R)}


# ------------------------------------------------------------------------------ completion

HELD_OUT = "Persuasion, The War of the Worlds"


def with_completion(runs, acc: dict):
    """``runs`` (novels_charlm's) with the completion fields of ``novels_lm`` rising to
    ``acc[norm]``: 120 questions of the held-out novels, one test set."""
    for r in runs:
        for row, a in zip(r.rows, _curve(0.2, acc[r.norm], n=len(r.rows), jitter=0.002 * r.seed)):
            row |= {"completion_accuracy": a, "completion_chance": 0.2,
                    "completion_questions": 120, "completion_sha256": "ab" * 32,
                    "completion_held_out": HELD_OUT}
    return runs


def _novels_runs(acc: dict):
    return with_completion(_arms("novels_charlm", "test_loss",
                                 {"none": 2.4, "batch": 2.25, "layer": 2.15},
                                 {n: 4.0 for n in ("none", "batch", "layer")}, dataset="novels"),
                           acc)


def test_the_novels_completion_claim_is_judged_on_its_own_runs():
    claim = _claims("novels_charlm")["novels-completion"]
    good = claim.evaluate(Inputs(out=Path("/nowhere"), runs=_novels_runs(
        {"none": 0.40, "batch": 0.42, "layer": 0.47})))
    assert good.status == SUPPORTED
    assert "120 questions" in good.key_number
    assert any(f"held-out novels ({HELD_OUT})" in c for c in good.caveats)
    assert not any("docstrings" in c for c in good.caveats)
    bad = claim.evaluate(Inputs(out=Path("/nowhere"), runs=_novels_runs(
        {"none": 0.47, "batch": 0.42, "layer": 0.40})))
    assert bad.status == NOT_SUPPORTED
    # the docstrings' claim does not read the novels' runs
    docs = _claims("paper_charlm")["charlm-completion"]
    assert docs.evaluate(Inputs(out=Path("/nowhere"),
                                runs=_novels_runs({"none": .4, "batch": .4, "layer": .5}))
                         ).status == "not run"


def test_two_completion_test_sets_are_not_compared_and_the_reason_fits_the_data():
    runs = _novels_runs({"none": 0.40, "batch": 0.42, "layer": 0.47})
    for row in runs[0].rows:
        row["completion_sha256"] = "cd" * 32
    res = _claims("novels_charlm")["novels-completion"].evaluate(
        Inputs(out=Path("/nowhere"), runs=runs))
    assert res.status == "not run" and "same data" in res.verdict.detail
    assert "Python version" not in res.verdict.detail


def test_the_novels_lm_runs_in_the_default_tier_with_1000_questions():
    from layernorm_paper.reproduce.command import EMBEDDED_ONLY
    assert records.RECORDS["novels_charlm"].tier == records.EMBEDDED
    assert "novels_charlm" in EMBEDDED_ONLY
    from layernorm_paper.experiments import get_experiment
    import layernorm_paper.reproduce  # noqa: F401  (registers the records)
    quick = get_experiment("novels_charlm").configs("quick")
    assert {c.norm for c in quick} == {"none", "batch", "layer"} and len(quick) == 15
    assert all(c.model_args["completion_questions"] >= 1000 for c in quick)
    full = get_experiment("novels_charlm").configs("full")
    assert full[0].model_args["hidden"] > quick[0].model_args["hidden"]


# ------------------------------------------------------------------------------ IMDb claims

def _imdb_runs(root: Path, errs: dict[str, float]) -> None:
    T = 100
    for norm, end in errs.items():
        for seed in range(5):
            cfg = {"experiment": "rnn_imdb", "task": "imdb", "dataset": "imdb", "norm": norm,
                   "batch_size": 32, "seed": seed, "steps": 400, "model": "rnn_classifier",
                   "model_args": {"hidden": 64, "embed": 64}, "data_args": {}}
            curve = [0.5 - (0.5 - end) * (1 - math.exp(-i)) for i in range(8)]
            hidden = [[0.0] + [0.3] * (T - 1)] * 8 if norm == "layer" else \
                [[0.0] + [0.05 * (k + 1) * 3 ** (t / T) for t in range(T - 1)] for k in range(8)]
            write_run(root, f"rnn_imdb/imdb-{norm}-{seed}", cfg,
                      rnn_rows([e + 0.002 * seed for e in curve], hidden))


def test_the_imdb_runs_carry_the_hidden_state_and_growth_claims(tmp_path):
    claims = _claims("rnn_imdb")
    assert {"rnn-hidden-imdb", "growth-init", "growth-trained"} <= set(claims)
    _imdb_runs(tmp_path / "runs", {"none": 0.2, "batch": 0.2, "layer": 0.2})
    inp = Inputs(out=tmp_path, runs=load_runs(tmp_path / "runs"))
    assert claims["rnn-hidden-imdb"].evaluate(inp).status == SUPPORTED
    # no growth measurement in the directory: not run, saying who writes it
    res = claims["growth-trained"].evaluate(inp)
    assert res.status == "not run" and "layernorm reproduce" in res.verdict.detail


def _growth_file(out: Path, ln_span: float, other_span: float, stage_rows=("init", "trained")):
    lengths = [50, 100, 200, 500, 1000]

    def row(span, seed):
        return {str(T): 10 ** (span * i / (len(lengths) - 1) + 0.01 * seed)
                for i, T in enumerate(lengths)}
    data = {"lengths": lengths, "hidden": 64, "input": 64, "streams": 4, "dtype": "float64",
            "init": [], "trained": []}
    for seed in range(5):
        if "init" in stage_rows:
            data["init"] += [{"model": "LN-LSTM", "seed": seed, "T": row(ln_span, seed)},
                             {"model": "LSTM", "seed": seed, "T": row(other_span, seed)},
                             {"model": "LN-GRU", "seed": seed, "T": row(other_span, seed)}]
        if "trained" in stage_rows:
            data["trained"] += [{"run": f"layer-{seed}", "norm": "layer", "seed": seed,
                                 "T": row(ln_span, seed)},
                                {"run": f"none-{seed}", "norm": "none", "seed": seed,
                                 "T": row(other_span, seed)}]
    (out / "analysis").mkdir(parents=True, exist_ok=True)
    (out / "analysis" / "growth.json").write_text(json.dumps(data))


def test_decades_spanned_and_a_gradient_beyond_float64():
    assert decades({"50": 1.0, "100": 1e3, "1000": 10.0}) == pytest.approx(3.0)
    assert decades({"50": 1.0, "1000": float("nan")}) == FLOAT64_DECADES
    assert decades({"50": 2.0, "1000": 2.0}) == 0.0


def test_growth_claims_supported_not_supported_and_gated(tmp_path):
    claims = _claims("rnn_imdb")
    _imdb_runs(tmp_path / "runs", {"none": 0.2, "batch": 0.2, "layer": 0.2})
    inp = Inputs(out=tmp_path, runs=load_runs(tmp_path / "runs"))
    # LN-LSTM's gradient spans 5 decades, the others' none (as at torch's initialization)
    _growth_file(tmp_path, ln_span=5.0, other_span=0.0)
    init = claims["growth-init"].evaluate(inp)
    assert init.status == NOT_SUPPORTED and "LN-LSTM 5.0" in init.key_number
    assert [r["model"] for r in init.table] == ["LN-LSTM", "LSTM", "LN-GRU"]
    assert claims["growth-trained"].evaluate(inp).status == NOT_SUPPORTED
    assert not any("no growth for LN to remove" in c for c in init.caveats)
    _growth_file(tmp_path, ln_span=0.3, other_span=0.2)
    flat = claims["growth-trained"].evaluate(inp)
    assert flat.status == NOT_SUPPORTED
    assert any("no growth for LN to remove" in c for c in flat.caveats)
    _growth_file(tmp_path, ln_span=0.0, other_span=4.0)
    assert claims["growth-init"].evaluate(inp).status == SUPPORTED
    assert claims["growth-trained"].evaluate(inp).status == SUPPORTED
    # after training the verdict needs the IMDb arms to have learned
    worse = tmp_path / "unlearned"
    _imdb_runs(worse / "runs", {"none": 0.5, "batch": 0.2, "layer": 0.2})
    _growth_file(worse, ln_span=0.0, other_span=4.0)
    res = claims["growth-trained"].evaluate(Inputs(out=worse, runs=load_runs(worse / "runs")))
    assert res.status == NO_LEARNING


# ------------------------------------------------------------------------------ measuring

def test_run_growth_measures_trained_runs_and_reuses_its_file(tmp_path, monkeypatch):
    """A tiny classifier run on embedded token data, written where rnn_imdb's runs go: its
    trained LSTM's |dL/dW_hh| at each T, the cells at initialization, then reused."""
    from layernorm_paper.experiments import Config, train
    from layernorm_paper.reproduce import growth
    for norm in ("none", "layer"):
        c = Config(experiment="rnn_imdb", dataset="cloze", model="rnn_classifier", norm=norm,
                   batch_size=8, seed=0, steps=2,
                   data_args={"n_train": 16, "n_test": 8, "n_facts": 2},
                   model_args={"hidden": 4, "embed": 3})
        train(c, tmp_path / "runs" / "rnn_imdb" / c.run_name())
    lengths = (3, 7)
    assert growth.run_growth(tmp_path, lengths, log=lambda *a: None) == {}
    data = json.loads((tmp_path / "analysis" / "growth.json").read_text())
    assert data["lengths"] == [3, 7] and len(data["trained"]) == 2
    assert {r["model"] for r in data["init"]} == {"LSTM", "LN-LSTM", "LN-GRU"}
    assert all(set(r["T"]) == {"3", "7"} and all(v > 0 for v in r["T"].values())
               for r in data["trained"] + data["init"])
    # reused: nothing is measured again
    monkeypatch.setattr(growth, "trained_growth", lambda *a: pytest.fail("measured again"))
    assert growth.run_growth(tmp_path, lengths, log=lambda *a: None) == {}
    assert growth.run_growth(tmp_path / "empty", lengths) != {}


def test_word_streams_read_the_test_reviews_in_order_and_wrap():
    from types import SimpleNamespace
    from layernorm_paper.reproduce.growth import STREAMS, _word_streams
    x = torch.tensor([[1, 2, 0], [3, 0, 0]])
    ds = SimpleNamespace(x_test=x, lengths_test=torch.tensor([2, 1]))
    ids, distinct = _word_streams(ds, 3)
    assert distinct == 3 and ids.shape == (STREAMS, 3)
    assert ids.flatten().tolist()[:6] == [1, 2, 3, 1, 2, 3]


# ------------------------------------------------------------------------------ the tier paper

@pytest.mark.parametrize("argv", [["--paper"], ["--full"], ["--preset", "paper"],
                                  ["--preset", "full"]])
def test_the_tier_paper_and_its_former_name(monkeypatch, tmp_path, argv):
    from layernorm_paper.cli import main
    from layernorm_paper.reproduce import command
    asked = []
    monkeypatch.setattr(command, "reproduce",
                        lambda tier, out, **kw: asked.append((tier, kw["device"])) or tmp_path)
    assert main(["reproduce", *argv, "--device", "cpu", "--out", str(tmp_path)]) == 0
    assert asked == [("paper", "cpu")]


@pytest.mark.parametrize("name", ["paper", "full"])
def test_the_tier_paper_keeps_the_directory_name_it_was_first_written_with(monkeypatch, tmp_path,
                                                                           name):
    """``reproduce("paper")`` (or its former name "full") runs the tier paper into
    runs/reproduce-full, the directory an earlier run of the same tier resumes from."""
    from layernorm_paper.reproduce import command
    asked = []
    monkeypatch.setattr(command, "_reproduce", lambda tier, out, *a, **k: asked.append((tier, out)))
    monkeypatch.chdir(tmp_path)
    command.reproduce(name, log=lambda *a: None)
    assert asked == [("paper", Path("runs") / "reproduce-full")]
    assert command.STORED_NAME[command.PAPER] == "full"


def test_device_reaches_every_training_config(monkeypatch, tmp_path, capsys):
    from layernorm_paper.cli import main
    from layernorm_paper.experiments import runner
    from layernorm_paper.reproduce import command
    seen = []
    monkeypatch.setattr(runner, "run_configs", lambda configs, *a, **k: seen.extend(configs) or [])
    command.reproduce("tiny", tmp_path, only=["rnn_norms"], device="cpu", report=False,
                      log=lambda *a: None)
    assert seen and {c.device for c in seen} == {"cpu"}
    assert json.loads((tmp_path / "reproduce.json").read_text())["device"] == "cpu"
    if not torch.cuda.is_available():
        assert main(["reproduce", "--tier", "tiny", "--device", "cuda", "--out",
                     str(tmp_path / "x")]) == 2
        assert "sees no CUDA GPU" in capsys.readouterr().err

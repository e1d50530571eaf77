"""`layernorm reproduce`: the tiny preset end to end, the models, and the rule that training code
never imports the report."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from layernorm_paper.data import load_dataset
from layernorm_paper.experiments import Config, get_experiment
from layernorm_paper.reproduce.command import EXPERIMENTS, reproduce
from layernorm_paper.models.classifiers import convnet, rnn_classifier

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny_out(tmp_path_factory):
    out = tmp_path_factory.mktemp("repro") / "tiny"
    reproduce("tiny", out, jobs=1, log=lambda *a: None)
    return out


def test_tiny_preset_runs_every_experiment_kind_and_builds_report(tiny_out):
    meta = json.loads((tiny_out / "reproduce.json").read_text())
    assert meta["tier"] == "tiny" and meta["failed_runs"] == []
    # the download experiment is listed as not run outside --full
    assert "rnn_downloads" in meta["not_run"]
    for name in ("mlp_batch_size", "cnn_batch_size", "rnn_norms", "lstm_gain_init"):
        runs = [d for d in (tiny_out / "runs" / name).iterdir() if d.is_dir()]
        assert runs and all((r / "done").exists() for r in runs), name
        n = len(get_experiment(name).configs("tiny"))
        assert len(runs) == n
    # RNN runs carry hidden-state statistics per time step (10 steps: 40 values read 4 at a time)
    rows = [json.loads(line) for line in
            (tiny_out / "runs/rnn_norms/mnist1d-layer-bs16-seed0/metrics.jsonl").read_text()
            .splitlines()]
    assert len(rows[-1]["hidden_std"]) == 10 and len(rows[-1]["hidden_mean"]) == 10
    md = (tiny_out / "report.md").read_text()
    assert "## Summary" in md and "## Environment" in md and "Reduced-scale run" in md
    assert "wall time" in md
    for fig in ("mlp_batch_size_curves", "mlp_batch_size_error_vs_batch", "cnn_batch_size_curves",
                "rnn_norms_mnist1d-seq_curves", "rnn_norms_mnist1d-seq_hidden",
                "lstm_gain_init_layer"):
        assert (tiny_out / "figures" / f"{fig}.png").stat().st_size > 5000, fig
        assert f"figures/{fig}.png" in md
    summary = {r["claim"]: r["verdict"] for r in
               json.loads((tiny_out / "summary.json").read_text())}
    # one seed per configuration: no rule over seeds may call anything supported or refuted
    # (the analysis claims, table1 and 5.2-*, are measurements without seeds); at the tiny
    # budget the report's guards may say so first (an arm undertrained or not learning)
    measured = [v for k, v in summary.items() if v != "not run" and k != "table1"
                and not k.startswith(("5.2", "ddp-"))]
    assert measured and "inconclusive" in measured
    assert set(measured) <= {"inconclusive", "undertrained", "baseline did not learn"}
    # the batch split (1 vs 2 processes, started by reproduce itself) is measured, not "not run"
    ddp = {k: summary[k] for k in ("ddp-ln", "ddp-bn", "ddp-bn-sync")}
    assert "not run" not in ddp.values(), ddp
    assert (tiny_out / "runs/ddp_batch_split/layer-bs8-seed0-w2/done").exists()
    assert summary["rnn-best-imdb"] == "not run"


def test_rerun_reuses_finished_runs_and_report_rebuilds(tiny_out, capsys):
    metrics = tiny_out / "runs/mlp_batch_size/layer-bs4-seed0/metrics.jsonl"
    before = metrics.stat().st_mtime_ns
    lines = []
    reproduce("tiny", tiny_out, jobs=1, only=["mlp_batch_size"], report=False, log=lines.append)
    assert metrics.stat().st_mtime_ns == before
    assert any("reused" in line for line in lines)
    # the first invocation's record (which trained everything) survives the rerun
    inv = json.loads((tiny_out / "reproduce.json").read_text())["invocations"]
    assert len(inv) == 2 and inv[0]["trained_runs"] == inv[0]["runs"] > 0
    assert inv[1]["trained_runs"] == 0
    from layernorm_paper.cli import main
    assert main(["report", str(tiny_out)]) == 0
    assert "6.6-bn" in capsys.readouterr().out


def test_only_rejects_unknown_names(tmp_path):
    with pytest.raises(ValueError, match="expected one of"):
        reproduce("tiny", tmp_path, only=["nope"], log=lambda *a: None)
    assert set(EXPERIMENTS) >= {"mlp_batch_size", "cnn_batch_size", "rnn_norms",
                                "lstm_gain_init", "rnn_downloads"}


def _imports_none_of(imports: str, forbidden: tuple[str, ...]) -> None:
    """In a fresh interpreter, run ``imports``; no module named or under ``forbidden`` loaded."""
    code = (f"import sys; {imports}; "
            f"bad = [m for m in sys.modules if m.startswith({forbidden!r})]; "
            f"print(bad); sys.exit(1 if bad else 0)")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_training_code_never_imports_the_report():
    _imports_none_of("import layernorm_paper.reproduce; "
                     "import layernorm_paper.experiments.training, layernorm_paper.experiments.runner, "
                     "layernorm_paper.models.classifiers, layernorm_paper.models.paper",
                     ("layernorm_paper.report", "matplotlib"))


def test_the_report_imports_no_training_code():
    """The report reads run directories (the distributed pairs included, via
    layernorm_paper.batch_split) without loading the runner, torch.distributed's code or reproduce."""
    _imports_none_of("import layernorm_paper.report",
                     ("layernorm_paper.experiments", "layernorm_paper.distributed",
                      "layernorm_paper.reproduce", "torch.distributed.run",
                      "torch.distributed.launcher", "torch.distributed.elastic"))


def test_building_a_report_imports_no_training_code(tmp_path):
    """Reading an output directory with runs of every claim family, judging and writing the
    report loads neither the runner, its training loop nor the reproduction (its records'
    configs are built only when the runner asks), and no part of torch.distributed beyond what
    ``import torch`` itself loads (no launcher, no elastic agent)."""
    from .test_report_golden import build_tree
    build_tree(tmp_path)
    code = (f"import sys, torch; "
            f"base = {{m for m in sys.modules if m.startswith('torch.distributed')}}; "
            f"from layernorm_paper.report import build_report; build_report({str(tmp_path)!r}); "
            f"bad = [m for m in sys.modules if m.startswith(('layernorm_paper.experiments', "
            f"'layernorm_paper.reproduce', 'layernorm_paper.distributed')) or "
            f"(m.startswith('torch.distributed') and m not in base)]; "
            f"print(bad); sys.exit(1 if bad else 0)")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "report.md").exists()


def test_records_hold_the_tier_table_and_register_every_experiment():
    from layernorm_paper import records
    from layernorm_paper.reproduce.command import EMBEDDED_ONLY
    assert EXPERIMENTS == records.run_order()
    assert set(EMBEDDED_ONLY) == {"cnn_batch_size", "paper_reader", "paper_charlm", "paper_draw",
                                  "paper_handwriting", "paper_order", "rnn_imdb", "mlp_mnist",
                                  "novels_charlm"}
    for name in (*EXPERIMENTS, "ddp_batch_split"):
        r, exp = records.RECORDS[name], get_experiment(name)
        assert (exp.section, exp.claim, exp.needs_download) == \
            (r.section, r.claim, r.tier == records.PAPER)
        assert r.tier in records.TIERS and r.tier != records.TINY


def test_every_quick_config_is_valid_and_has_three_seeds():
    for name in ("mlp_batch_size", "cnn_batch_size", "rnn_norms", "rnn_stability",
                 "lstm_gain_init"):
        configs = get_experiment(name).configs("quick")
        groups = {}
        for c in configs:
            data = {k: v for k, v in c.data_args.items() if k not in ("seed", "split_seed")}
            key = json.dumps({**c.to_dict(), "seed": None, "data_args": data}, sort_keys=True)
            groups.setdefault(key, set()).add(c.seed)
        assert all(len(s) >= 3 for s in groups.values()), name
    for name in EXPERIMENTS:      # --full builds valid configs (no data is loaded here)
        assert get_experiment(name).configs("full")
    full = get_experiment("mlp_batch_size").configs("full")
    assert {c.model_args["hidden"] == [1000, 1000] for c in full} == {True}
    assert {c.norm for c in full} == {"none", "batch", "layer", "weight", "rms"}


# --- models ------------------------------------------------------------------------------------

def test_convnet_norms_train_at_batch_one():
    ds = load_dataset("digits-image", limit_train=8, limit_test=8)
    for norm in ("none", "batch", "layer", "weight"):
        m = convnet(ds, norm, channels=(4, 8))
        out = m(ds.x_train[:1])                       # batch 1: BN has spatial statistics
        assert out.shape == (1, 10)
        out.sum().backward()
        assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in m.parameters())
    # the logits are never normalized: the last module is a plain Linear
    assert type(convnet(ds, "layer").head) is torch.nn.Linear


def test_rnn_classifier_hidden_stats_and_tokens_with_lengths():
    ds = load_dataset("digits-pixels", permute=True, limit_train=8, limit_test=8)
    for norm in ("none", "batch", "layer"):
        m = rnn_classifier(ds, norm, hidden=6, chunk=4, embed=5)
        assert m(ds.x_train).shape == (8, 10)
        stats = m.eval().extra_metrics(ds.x_test)
        assert len(stats["hidden_std"]) == 16 and all(s >= 0 for s in stats["hidden_std"])
    # token ids with true lengths (IMDb-like): padded steps do not enter the statistics
    from layernorm_paper.data import Dataset
    x = torch.randint(2, 50, (4, 7))
    lengths = torch.tensor([7, 3, 5, 2])
    for i, n in enumerate(lengths):
        x[i, n:] = 0
    tok = Dataset(name="t", task="classify", x_train=x, y_train=torch.tensor([0, 1, 0, 1]),
                  x_test=x, y_test=torch.tensor([0, 1, 0, 1]), num_classes=2, vocab_size=50,
                  lengths_train=lengths, lengths_test=lengths)
    m = rnn_classifier(tok, "layer", hidden=6, embed=5)
    out = m(x, lengths=lengths)
    assert out.shape == (4, 2)
    # the padded example's output equals running it alone, unpadded
    alone = m(x[1:2, :3], lengths=lengths[1:2])
    assert torch.allclose(out[1], alone[0], atol=1e-5)
    assert len(m.extra_metrics(x, lengths=lengths)["hidden_std"]) == 7
    with pytest.raises(ValueError, match="embed"):
        rnn_classifier(tok, "layer", hidden=6)
    # a character-level LM: token ids in, next-token logits at every step out
    lm = Dataset(name="lm", task="classify", x_train=x, y_train=x, x_test=x, y_test=x,
                 num_classes=50, vocab_size=50)
    for norm in ("none", "batch", "layer"):
        assert rnn_classifier(lm, norm, hidden=6, embed=5)(x).shape == (4, 7, 50)


def test_quick_configs_use_the_unbiased_variance_at_small_batch():
    for c in get_experiment("mlp_batch_size").configs("quick"):
        assert c.model_args["unbiased"] == (c.batch_size < 16)
    assert isinstance(Config(), Config)


def test_quick_budgets_update_counts_log_grid_and_seeded_splits():
    from layernorm_paper import records
    BUDGETS = records.budgets()
    mlp = get_experiment("mlp_batch_size").configs("quick")
    for c in mlp:
        # every arm gives its update count; evaluations hit eval_every * 2**j for all j
        k = c.steps // c.eval_every
        assert c.steps % c.eval_every == 0 and k & (k - 1) == 0 and k >= 16, c.run_name()
        assert c.data_args == {"split_seed": c.seed}     # the test split varies with the seed
    arms = {(c.norm, c.tag, c.model_args.get("bn_logits", False)) for c in mlp}
    assert {("batch", "", False), ("batch", "bnall", True), ("layer", "", False)} <= arms
    cnn = get_experiment("cnn_batch_size").configs("quick")
    seeds = {}
    for c in cnn:
        seeds.setdefault((c.norm, c.batch_size), set()).add(c.seed)
        assert c.steps // c.eval_every >= 20
    assert len(seeds[("batch", 128)]) == len(seeds[("layer", 128)]) >= 5
    assert set(BUDGETS) == {"mlp_batch_size", "mlp_mnist", "cnn_batch_size"}
    assert all(b["rule"] in ("to convergence", "same updates") for b in BUDGETS.values())
    stab = get_experiment("rnn_stability").configs("quick")
    assert {c.data_args["length"] for c in stab} == {100}


def test_bn_models_are_scored_with_population_statistics_and_ema_kept():
    from layernorm_paper.models.classifiers import repro_mlp
    ds = load_dataset("digits", limit_train=64, limit_test=32)
    torch.manual_seed(0)
    m = repro_mlp(ds, "batch", hidden=[8], bn_logits=True)
    for i in range(0, 64, 4):                     # a few EMA updates
        m(ds.x_train[i:i + 4])
    ema = {k: v.clone() for k, v in m.state_dict().items() if "running" in k}
    row = m.extra_metrics(ds.x_test)
    assert row["bn_scoring"] == "population" and row["pop_sample"] == 64
    for key in ("eval_test_error", "eval_test_loss", "eval_train_nll", "eval_train_error",
                "ema_train_nll"):
        assert isinstance(row[key], float), key
    # the running averages are back after scoring, the mode too
    assert all(torch.equal(m.state_dict()[k], v) for k, v in ema.items()) and m.training
    # with population statistics the training-sample NLL is the eval-mode loss of that model
    import layernorm
    layernorm.recompute_batch_stats(m, [ds.x_train[i:i + 200] for i in range(0, 64, 200)])
    with torch.no_grad():
        nll = torch.nn.functional.cross_entropy(m.eval()(ds.x_train), ds.y_train)
    assert abs(float(nll) - row["eval_train_nll"]) < 1e-4
    row = repro_mlp(ds, "layer", hidden=[8]).extra_metrics(ds.x_test)
    assert "ema_train_nll" not in row and "eval_test_error" not in row and "eval_train_nll" in row
    with pytest.raises(ValueError, match="bn_logits"):
        repro_mlp(ds, "layer", bn_logits=True)


def test_rnn_summed_input_statistics_per_step():
    ds = load_dataset("adding", length=12, n_train=16, n_test=8)
    for norm in ("none", "batch", "layer"):
        m = rnn_classifier(ds, norm, hidden=4, embed=3)
        stats = m.hidden_stats(ds.x_test)
        assert len(stats["summed_std"]) == len(stats["hidden_std"]) == 12
        assert stats["summed_std"][0] > 0 and stats["hidden_mean"]
        # a_0 = W_x e_0 (h_{-1} = 0): check the first step by hand
        with torch.no_grad():
            a0 = m.embed(ds.x_test)[:, 0] @ m.lstm.weight_ih_l0.t()
        assert abs(float(a0.std(unbiased=False)) - stats["summed_std"][0]) < 1e-4


@pytest.mark.parametrize("argv, tier", [([], "embedded"), (["--embedded"], "embedded"),
                                        (["--quick"], "quick"), (["--full"], "paper"),
                                        (["--paper"], "paper"), (["--preset", "full"], "paper"),
                                        (["--preset", "paper"], "paper"),
                                        (["--preset", "standard"], "embedded"),
                                        (["--preset", "embedded"], "embedded"),
                                        (["--preset", "tiny"], "tiny"),
                                        (["--tier", "tiny"], "tiny"), (["--tier", "paper"], "paper"),
                                        (["--tier", "standard"], "embedded")])
def test_the_command_line_picks_the_tier(monkeypatch, tmp_path, argv, tier):
    """``layernorm reproduce`` (the README's command) is read as the tier embedded, as is
    --tier standard (its former name); --quick, --paper and --tier NAME as named, --full and
    --tier full (the former names) as the tier paper, --preset (the former name of --tier) as
    --tier; the tier reaches ``reproduce``."""
    from layernorm_paper.cli import main
    from layernorm_paper.reproduce import command

    asked = []

    def fake_reproduce(tier, out, **kwargs):
        asked.append(tier)
        return tmp_path
    monkeypatch.setattr(command, "reproduce", fake_reproduce)
    assert main(["reproduce", *argv, "--out", str(tmp_path)]) == 0
    assert asked == [tier]


@pytest.mark.parametrize("flag", ["--tier", "--preset"])
def test_quick_and_tier_exclude_each_other(capsys, flag):
    from layernorm_paper.cli import main
    assert main(["reproduce", "--quick", flag, "tiny"]) == 2
    assert "not allowed with argument --quick" in capsys.readouterr().err


@pytest.mark.parametrize("argv, scale", [([], "quick"), (["--scale", "tiny"], "tiny"),
                                         (["--scale", "full"], "full"),
                                         (["--preset", "tiny"], "tiny")])
def test_the_run_command_reads_the_scale(monkeypatch, tmp_path, argv, scale):
    """``layernorm run NAME --scale SCALE`` trains the experiment's configs at that scale (quick
    by default); --preset, its former name, still works."""
    from layernorm_paper.cli import main
    from layernorm_paper.experiments import registry

    asked = []
    experiment = registry.get_experiment("digits_mlp")

    class Probe:
        def __getattr__(self, name):
            return getattr(experiment, name)

        def configs(self, s):
            asked.append(s)
            raise SystemExit(0)
    monkeypatch.setattr("layernorm_paper.experiments.cli.get_experiment", lambda name: Probe())
    with pytest.raises(SystemExit):
        main(["run", "digits_mlp", *argv, "--out", str(tmp_path)])
    assert asked == [scale]

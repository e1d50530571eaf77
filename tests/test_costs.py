"""`layernorm reproduce --costs DIR`: the cost table read from run directories (hand-made ones
here), and the cost.json the training loop writes."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from layernorm_paper.experiments import Config, train
from layernorm_paper.reproduce.costs import by_experiment, costs, format_costs

ROOT = Path(__file__).resolve().parents[1]


def _run(root: Path, exp: str, name: str, wall: float, cpu: float | None, done=True,
         stacked: int = 1) -> None:
    d = root / "runs" / exp / name
    d.mkdir(parents=True)
    (d / "config.json").write_text("{}")
    (d / "metrics.jsonl").write_text(json.dumps({"step": 10, "test_error": 0.1,
                                                 "wall_time": wall}) + "\n")
    if cpu is not None:
        (d / "cost.json").write_text(json.dumps({"wall_s": wall, "cpu_s": cpu, "steps": 10,
                                                 "torch_threads": 1, "stacked": stacked}))
    if done:
        (d / "done").write_text("{}")


@pytest.fixture
def out(tmp_path):
    _run(tmp_path, "mlp_batch_size", "layer-bs4-seed0", 10.0, 9.0, stacked=2)
    _run(tmp_path, "mlp_batch_size", "layer-bs4-seed1", 12.0, 11.0, stacked=2)
    _run(tmp_path, "mlp_batch_size", "bnall-batch-bs128-seed0", 3.0, 2.5)
    _run(tmp_path, "mlp_batch_size", "layer-bs128-seed0", 99.0, 99.0, done=False)  # unfinished
    _run(tmp_path, "rnn_norms", "adding-batch-bs32-seed0", 40.0, None)   # no cost.json: older
    return tmp_path


def test_costs_per_arm_and_experiment(out):
    rows = {(c.experiment, c.arm): c for c in costs(out)}
    assert set(rows) == {("mlp_batch_size", "layer-bs4"), ("mlp_batch_size", "bnall-batch-bs128"),
                         ("rnn_norms", "adding-batch-bs32")}
    arm = rows["mlp_batch_size", "layer-bs4"]
    assert (arm.runs, arm.wall_s, arm.cpu_s, arm.cpu_runs, arm.stacked) == (2, 22.0, 20.0, 2, 2)
    old = rows["rnn_norms", "adding-batch-bs32"]       # wall from the last metrics row
    assert (old.runs, old.wall_s, old.cpu_runs) == (1, 40.0, 0)
    exps = by_experiment(costs(out))
    assert [e.experiment for e in exps] == ["rnn_norms", "mlp_batch_size"]   # costliest first
    assert exps[1].runs == 3 and exps[1].wall_s == 25.0 and exps[1].cpu_s == 22.5


def test_format_costs_and_command(out):
    text = format_costs(out)
    assert "| `mlp_batch_size` | 3 | 25 | 22 | 2 |" in text
    assert "| `rnn_norms` | 1 | 40 | — | 0 |" in text
    assert "| total | 4 | 65 | 22 (3 runs) | 2 |" in text
    assert "| `mlp_batch_size` | `layer-bs4` | 2 | 22.0 | 20 |" in text
    res = subprocess.run([sys.executable, "-m", "layernorm_paper", "reproduce", "--costs",
                          str(out)], capture_output=True, text=True, cwd=ROOT,
                         env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr
    assert text in res.stdout


def test_costs_of_a_folder_without_runs(tmp_path):
    with pytest.raises(ValueError, match="no runs/ folder"):
        costs(tmp_path / "missing")


def test_training_writes_cost_json(tmp_path):
    cfg = Config(dataset="digits", model="mlp", norm="layer", batch_size=32, steps=6,
                 eval_every=3, model_args={"hidden": [8]})
    run = train(cfg, tmp_path / "adhoc" / "r")
    cost = json.loads((run / "cost.json").read_text())
    assert cost["steps"] == 6 and cost["stacked"] == 1
    assert cost["wall_s"] > 0 and cost["cpu_s"] > 0
    assert costs(tmp_path)[0].runs == 1   # a folder of experiment folders is read too

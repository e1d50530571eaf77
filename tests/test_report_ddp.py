"""The report's distributed section (1 process x 8 vs 2 processes x 4), on synthetic run
directories: NAME / NAME-w2 pairs with real checkpoints written the runner's way (no training,
no torchrun)."""
import json

import torch
from torch import nn

from layernorm_paper import report as R
from layernorm_paper.experiments.rundir import save_checkpoint
from layernorm_paper.verdicts import INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED
from .test_report import prose

DDP_CLAIMS = ("ddp-ln", "ddp-bn", "ddp-bn-sync")


def _model(norm: str) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 4), nn.BatchNorm1d(4) if norm == "batch" else
                         nn.LayerNorm(4), nn.Linear(4, 3))


def write_pair(root, name, norm, diff, *, sync=False, steps=6, steps_multi=None, world=2):
    """``name`` (1 process) and ``name-w{world}``: the same parameters, the second's first weight
    moved by ``diff``. Batch-norm running statistics differ a lot (they are not compared)."""
    exp = root / "runs" / R.DDP_EXPERIMENT
    config = {"experiment": R.DDP_EXPERIMENT, "dataset": "digits", "model": "mlp", "norm": norm,
              "batch_size": 8, "seed": 0, "sync_bn": sync, "model_args": {}, "data_args": {}}
    for run, delta, n in ((name, 0.0, steps), (f"{name}-w{world}", diff, steps_multi or steps)):
        model = _model(norm)
        with torch.no_grad():
            model[0].weight[0, 0] += delta
            if norm == "batch":
                model[1].running_mean += 10.0 * (run != name)
        d = exp / run
        d.mkdir(parents=True)
        (d / "config.json").write_text(json.dumps(config))
        save_checkpoint(d / "checkpoint.pt", {"config": config, "step": n,
                                               "model": model.state_dict()})
        (d / "done").write_text("{}")


def summary(root):
    R.build_report(root)
    return {r["claim"]: r for r in json.loads((root / "summary.json").read_text())}


def test_three_facts_supported_and_section_written(tmp_path):
    write_pair(tmp_path, "layer", "layer", 3e-8)
    write_pair(tmp_path, "batch", "batch", 0.1)
    write_pair(tmp_path, "batch-sync", "batch", 5e-8, sync=True)
    s = summary(tmp_path)
    assert {c: s[c]["verdict"] for c in DDP_CLAIMS} == dict.fromkeys(DDP_CLAIMS, SUPPORTED)
    assert "1.0e-01" in s["ddp-bn"]["key"] and "1 x 8 vs 2 x 4" in s["ddp-bn"]["key"]
    md = prose(tmp_path)
    assert "## Distributed: 1 process x batch 8 vs 2 processes x 4" in md
    assert "(#ddp-bn-sync) | ✅ holds |" in md    # a row of the checks table (appendix)
    assert "## Checks of this implementation" in md
    # the rows as a table, printed once and referred to by the other two claims
    assert md.count("| batch + sync | 1 x 8 vs 2 x 4 | 6 |") == 1
    assert all(f"The measured numbers of {c}: as under [ddp-ln](#ddp-ln)." in md
               for c in ("ddp-bn", "ddp-bn-sync"))
    assert "diff / tolerance" in md and "1.0e-04" in md


def test_ln_that_differs_is_not_supported(tmp_path):
    write_pair(tmp_path, "layer", "layer", 0.05)          # 500 x the tolerance
    write_pair(tmp_path, "batch", "batch", 2e-3)          # in the gap: 20 x the tolerance
    s = summary(tmp_path)
    assert s["ddp-ln"]["verdict"] == NOT_SUPPORTED
    assert s["ddp-bn"]["verdict"] == INCONCLUSIVE
    assert s["ddp-bn-sync"]["verdict"] == R.NOT_RUN        # its pair is missing


def test_no_runs_is_not_run_with_the_commands(tmp_path):
    # written with the key's former name, "preset": read as the tier tiny
    (tmp_path / "reproduce.json").write_text(json.dumps({"preset": "tiny"}))
    (tmp_path / "analysis").mkdir()
    (tmp_path / "analysis" / "invariance.json").write_text("{}")   # something else to judge
    s = summary(tmp_path)
    assert {c: s[c]["verdict"] for c in DDP_CLAIMS} == dict.fromkeys(DDP_CLAIMS, R.NOT_RUN)
    md = prose(tmp_path)
    runs = tmp_path / "runs"
    assert (f"`torchrun --nproc-per-node 2 -m layernorm run ddp_batch_split --scale tiny "
            f"--out {runs}`") in md
    assert f"`layernorm run ddp_batch_split --scale tiny --out {runs}`" in md
    # a single-process run without its torchrun partner is still "not run"
    write_pair(tmp_path, "layer", "layer", 0.0)
    (runs / R.DDP_EXPERIMENT / "layer-w2" / "done").unlink()
    assert summary(tmp_path)["ddp-ln"]["verdict"] == R.NOT_RUN


def test_mismatched_pair_is_inconclusive_not_a_crash(tmp_path):
    write_pair(tmp_path, "layer", "layer", 0.0, steps_multi=4)
    s = summary(tmp_path)
    assert s["ddp-ln"]["verdict"] == INCONCLUSIVE and "not the same run" in \
        prose(tmp_path)

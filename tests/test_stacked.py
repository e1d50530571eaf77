"""Seeds trained together (``experiments.stacked``): a stacked group of one arm's seeds gives
each seed the run directory, rows, parameters, batch-norm running statistics and checkpoints of
its separate run (within float rounding), and a killed group resumes run by run."""
import json
from dataclasses import replace

import pytest
import torch

import layernorm_paper.reproduce  # noqa: F401  (registers repro_mlp)
from layernorm_paper.experiments import Config, register_model, train
from layernorm_paper.experiments import stacked as stacked_mod
from layernorm_paper.experiments.rundir import read_metrics
from layernorm_paper.experiments.runner import run_configs
from layernorm_paper.experiments.stacked import groups, stack_key, train_stacked
from layernorm_paper.models.classifiers import MLP

SEEDS = (0, 1, 2)


def _arm(norm="layer", batch_size=4, optimizer="adam", steps=12, bn_logits=False):
    args = {"hidden": [16, 16], "unbiased": batch_size < 16}
    if bn_logits:
        args["bn_logits"] = True
    return [Config(experiment="stk", dataset="digits", model="repro_mlp", norm=norm,
                   batch_size=batch_size, seed=s, optimizer=optimizer, lr=1e-2, steps=steps,
                   eval_every=4, checkpoint_every=6, tag="bnall" if bn_logits else "",
                   data_args={"split_seed": s}, model_args=args) for s in SEEDS]


def _pre_bn_bias(name: str, state: dict) -> bool:
    """A Linear bias followed by batch norm: BN removes it, so its gradient is float noise that
    Adam scales to full steps in separate runs too; it is not compared."""
    if not name.endswith(".0.bias"):
        return False
    return name[:-len("0.bias")] + "1.running_mean" in state


def _compare(a_dir, b_dir, keys=None, tol=1e-4):
    ra, rb = read_metrics(a_dir), read_metrics(b_dir)
    assert [r["step"] for r in ra] == [r["step"] for r in rb]
    for x, y in zip(ra, rb):
        assert set(x) == set(y)
        for k in keys or x:
            if k != "wall_time" and isinstance(x[k], float):
                assert x[k] == pytest.approx(y[k], rel=tol, abs=tol), (k, x["step"])
    return torch.load(a_dir / "checkpoint.pt", weights_only=True), \
        torch.load(b_dir / "checkpoint.pt", weights_only=True)


@pytest.mark.parametrize("norm,optimizer,bn_logits", [
    ("none", "adam", False), ("layer", "adam", False), ("batch", "sgd", True),
    ("batch", "adam", False)])
def test_stacked_equals_separate_runs(tmp_path, norm, optimizer, bn_logits):
    arm = _arm(norm, optimizer=optimizer, bn_logits=bn_logits)
    train_stacked(arm, [tmp_path / "stk" / c.run_name() for c in arm])
    for c in arm:
        train(c, tmp_path / "sep" / c.run_name())
    for c in arm:
        a, b = tmp_path / "stk" / c.run_name(), tmp_path / "sep" / c.run_name()
        assert json.loads((a / "config.json").read_text()) == c.to_dict()
        adam_bn = norm == "batch" and optimizer == "adam"
        # with Adam, the BN runs' EMA scores carry the noise of the pre-BN biases (above); the
        # population-scored ones (eval_*) do not
        keys = ["train_loss", "eval_test_loss", "eval_test_error", "eval_train_nll"] \
            if adam_bn else None
        ca, cb = _compare(a, b, keys)
        assert ca["step"] == cb["step"] == c.steps
        for name, v in cb["model"].items():
            if adam_bn and (_pre_bn_bias(name, cb["model"]) or "running_mean" in name):
                continue
            torch.testing.assert_close(ca["model"][name], v, rtol=1e-4, atol=1e-5, msg=name)
        # the seed's own optimizer state, in the layout of its separate run
        assert ca["optimizer"]["param_groups"] == cb["optimizer"]["param_groups"]
        assert ca["optimizer"]["state"].keys() == cb["optimizer"]["state"].keys()
        torch.testing.assert_close(ca["rng_torch"], cb["rng_torch"])
        cost = json.loads((a / "cost.json").read_text())
        assert cost["stacked"] == len(SEEDS) and cost["steps"] == c.steps


def test_batch_norm_running_statistics_per_seed(tmp_path):
    arm = _arm("batch", optimizer="sgd", batch_size=128, steps=6)
    train_stacked(arm, [tmp_path / "stk" / c.run_name() for c in arm])
    stats = []
    for c in arm:
        train(c, tmp_path / "sep" / c.run_name())
        a = torch.load(tmp_path / "stk" / c.run_name() / "checkpoint.pt", weights_only=True)
        b = torch.load(tmp_path / "sep" / c.run_name() / "checkpoint.pt", weights_only=True)
        for k in ("net.1.1.running_mean", "net.1.1.running_var", "net.3.1.running_var",
                  "net.1.1.num_batches_tracked"):
            torch.testing.assert_close(a["model"][k], b["model"][k], rtol=1e-4, atol=1e-5)
        stats.append(a["model"]["net.1.1.running_var"])
    assert not torch.allclose(stats[0], stats[1])      # each seed its own statistics


def test_killed_group_resumes_run_by_run(tmp_path, monkeypatch):
    arm = _arm("layer")
    whole = tmp_path / "whole"
    train_stacked(arm, [whole / c.run_name() for c in arm])
    real, calls = stacked_mod.save_checkpoint, []

    def dies_after_first_checkpoints(path, state):
        real(path, state)
        calls.append(path)
        if len(calls) == len(arm):       # every seed has its step-6 checkpoint: kill the group
            raise KeyboardInterrupt
    monkeypatch.setattr(stacked_mod, "save_checkpoint", dies_after_first_checkpoints)
    out = tmp_path / "runs"
    dirs = [out / "stk" / c.run_name() for c in arm]
    with pytest.raises(KeyboardInterrupt):
        train_stacked(arm, dirs)
    assert all(not (d / "done").exists() for d in dirs)
    assert groups(arm, dirs) == [[0], [1], [2]]      # started runs resume one by one
    results = run_configs(arm, out, progress=False, log=lambda *a: None)
    assert [r.status for r in results] == ["done"] * len(arm)
    for c, d in zip(arm, dirs):
        _compare(whole / c.run_name(), d, tol=1e-5)
        env = json.loads((d / "env.json").read_text())
        assert env["resumes"][0]["step"] == 6


def test_runner_stacks_new_seeds_and_reuses_them(tmp_path):
    arm = _arm("layer", steps=4) + _arm("none", steps=4)
    odd = replace(arm[0], model="mlp", model_args={"hidden": [8]}, tag="plain")
    assert stack_key(odd) is None                        # the runner's mlp is not stackable
    configs = arm + [odd]
    results = run_configs(configs, tmp_path, progress=False, log=lambda *a: None)
    assert [r.status for r in results] == ["done"] * len(configs)
    for r in results[:-1]:
        assert json.loads((r.run_dir / "cost.json").read_text())["stacked"] == len(SEEDS)
    assert json.loads((results[-1].run_dir / "cost.json").read_text())["stacked"] == 1
    again = run_configs(configs, tmp_path, progress=False, log=lambda *a: None)
    assert [r.status for r in again] == ["skipped"] * len(configs)


def test_runner_stacks_in_worker_processes(tmp_path):
    arm = _arm("batch", steps=4, batch_size=128)
    results = run_configs(arm, tmp_path, jobs=2, progress=False, log=lambda *a: None, threads=1)
    assert [r.status for r in results] == ["done"] * len(arm)
    assert all(json.loads((r.run_dir / "cost.json").read_text())["stacked"] == len(arm)
               for r in results)


class _VmapMLP(MLP):
    stacked_forward = None     # no batched forward of its own: stacked under torch.func.vmap


@register_model("stk_vmap_mlp", stackable=True)
def _vmap_mlp(dataset, norm, hidden=(16, 16), unbiased=False):
    model = _VmapMLP(64, dataset.output_size, norm, tuple(hidden), unbiased, False)
    model._attach(dataset, norm)
    return model


@pytest.mark.parametrize("norm", ["layer", "batch"])
def test_vmap_path_equals_separate_runs(tmp_path, norm):
    arm = [replace(c, model="stk_vmap_mlp", optimizer="sgd") for c in _arm(norm, steps=8)]
    train_stacked(arm, [tmp_path / "stk" / c.run_name() for c in arm])
    for c in arm:
        train(c, tmp_path / "sep" / c.run_name())
        ca, cb = _compare(tmp_path / "stk" / c.run_name(), tmp_path / "sep" / c.run_name())
        for name, v in cb["model"].items():
            torch.testing.assert_close(ca["model"][name], v, rtol=1e-4, atol=1e-5, msg=name)

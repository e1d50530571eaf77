"""Reading the batch-split demonstration's run directories: 1 process (``NAME``) vs W processes
(``NAME-wW``) of the same config, compared on their final parameters.

Reads files only (``config.json``, ``done``, ``checkpoint.pt``) and imports no training code, so
both ``layernorm ddp-compare`` (``layernorm_paper.distributed``) and the reproduction report
(``layernorm_paper.report``, which training code never imports) use it.
"""
from __future__ import annotations

import os
from pathlib import Path

import torch

from ._io import load_weights, read_json

DDP_EXPERIMENT = "ddp_batch_split"   # the experiment whose run directories these are
BUFFERS = ("running_mean", "running_var", "num_batches_tracked")


class CheckpointError(ValueError):
    """A finished run's checkpoint cannot be read (names the file and the fix)."""


def final_parameters(run_dir: str | os.PathLike) -> tuple[dict[str, torch.Tensor], int]:
    """The model parameters (float64, batch-norm buffers left out) and step of ``run_dir``'s
    checkpoint. A checkpoint that cannot be loaded with ``weights_only=True`` or does not hold
    ``model`` (tensors) and ``step`` (an integer) raises a CheckpointError naming it."""
    path = Path(run_dir) / "checkpoint.pt"
    fix = (f"It is loaded with weights_only=True and must be a checkpoint the runner wrote; "
           f"delete {run_dir} and train that run again.")
    state = load_weights(path, fix, error=CheckpointError)
    model = state.get("model") if isinstance(state, dict) else None
    step = state.get("step") if isinstance(state, dict) else None
    if (not isinstance(model, dict) or not all(torch.is_tensor(v) for v in model.values())
            or not isinstance(step, int) or isinstance(step, bool)):
        got = ({k: type(v).__name__ for k, v in state.items()} if isinstance(state, dict)
               else type(state).__name__)
        raise CheckpointError(f"{path} cannot be read as a checkpoint (expected a dict with "
                              f"'model' (tensors) and 'step' (an integer), received {got}). "
                              f"{fix}")
    params = {k: v.double() for k, v in model.items() if not k.endswith(BUFFERS)}
    return params, step


def batch_split_rows(exp_dir: str | os.PathLike) -> list[dict]:
    """One row per run that exists both as ``NAME`` (1 process) and ``NAME-wW`` (W processes, same
    config, finished): the largest parameter difference between their final checkpoints.

    Keys: run, norm (``"batch + sync"`` for ``sync_bn``), split, steps, ``max |param diff|``,
    ``max |param|`` (of the 1-process run). A pair whose step counts or parameter names differ
    raises a ValueError.
    """
    exp_dir = Path(exp_dir)
    rows = []
    for single in sorted(p for p in exp_dir.iterdir() if (p / "done").exists()):
        for multi in sorted(exp_dir.glob(f"{single.name}-w*")):
            if not (multi / "done").exists() or not multi.name[len(single.name) + 2:].isdigit():
                continue
            world = int(multi.name[len(single.name) + 2:])
            fix = f"Delete {single} and train that run again."
            config = read_json(single / "config.json", "the run's config, written by the "
                               "runner", fix, required=True)
            if not (isinstance(config, dict) and isinstance(config.get("norm"), str)
                    and isinstance(config.get("batch_size"), int)):
                raise ValueError(f"{single / 'config.json'} holds {str(config)[:80]}; expected "
                                 f"the run's config with 'norm' and 'batch_size'. {fix}")
            a, step_a = final_parameters(single)
            b, step_b = final_parameters(multi)
            if step_a != step_b or a.keys() != b.keys():
                raise ValueError(f"{single} and {multi} are not the same run (steps {step_a} vs "
                                 f"{step_b}). Delete one and train it again.")
            batch = config["batch_size"]
            rows.append({
                "run": single.name, "norm": config["norm"] + (" + sync" if config.get("sync_bn")
                                                              else ""),
                "split": f"1 x {batch} vs {world} x {batch // world}", "steps": step_a,
                "max |param diff|": max(float((a[k] - b[k]).abs().max()) for k in a),
                "max |param|": max(float(a[k].abs().max()) for k in a)})
    return rows

"""Reading the batch-split demonstration's run directories: 1 process (``NAME``) vs W processes
(``NAME-wW``) of the same config, compared on their final parameters.

Reads files only (``config.json``, ``done``, ``checkpoint.pt``) and imports no training code, so
both ``layernorm ddp-compare`` (``layernorm_paper.distributed``) and the reproduction report
(``layernorm_paper.report``, which training code never imports) use it.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import torch

DDP_EXPERIMENT = "ddp_batch_split"   # the experiment whose run directories these are
BUFFERS = ("running_mean", "running_var", "num_batches_tracked")


def final_parameters(run_dir: str | os.PathLike) -> tuple[dict[str, torch.Tensor], int]:
    """The model parameters (float64, batch-norm buffers left out) and step of ``run_dir``'s
    checkpoint."""
    state = torch.load(Path(run_dir) / "checkpoint.pt", map_location="cpu", weights_only=True)
    params = {k: v.double() for k, v in state["model"].items() if not k.endswith(BUFFERS)}
    return params, state["step"]


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
            config = json.loads((single / "config.json").read_text())
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

"""Seeds trained together: the configs of one arm that differ only in their seed (and the
seeded test split that goes with it) trained as one stacked model, so that a small model pays
its per-operation overhead once per step instead of once per seed (docs/runner.md, "Seeds
trained together").

Each seed keeps what its own run would have: its initial weights (built after
``torch.manual_seed(seed)``, as ``train`` builds them), its data order (``epoch_order`` of its
seed), its dataset (its own test split), its optimizer state (Adam, SGD and RMSprop act on each
element alone, so one optimizer over the stacked parameters is the per-seed optimizers side by
side). One step runs every seed's forward pass at once, then the backward pass of the sum of the
seeds' losses (each seed's gradient is that of its own loss). The forward pass is the model's
``stacked_forward(params, buffers, x)`` where it has one (``sequential_forward`` below: batched
matrix products, one layer-norm and one batch-norm call over every seed's features), otherwise
``torch.func.vmap`` over ``functional_call`` (batch norm's running statistics are stacked
buffers, updated per seed).

Every seed writes its own run directory exactly as ``train`` does: config.json, env.json,
metrics.jsonl rows from the same evaluation code (the stacked weights copied into the seed's own
module first; ``wall_time`` is the group's time so far divided by S), checkpoints in the same
format with the seed's own optimizer state, and cost.json (1/S of the group's cost each,
``stacked`` = S). A killed group therefore leaves S ordinary partial runs, which ``train``
resumes one by one. Results equal the separate runs' up to float rounding (batched matrix
products sum in another order).
"""
from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from layernorm import functional as LF
from layernorm.norms import BatchNorm, LayerNorm

from .._io import atomic_write_json, atomic_write_text
from ..data import Dataset
from .holdout import load_for
from .config import Config
from .registry import STACKABLE, build_model
from .rundir import (CHECKPOINT_FORMAT, _append_row, check_run_dir, claim, environment,
                     read_metrics, save_checkpoint, write_cost)
from .runtime import resolve_device
from .training import (_extra_metrics, _forward, _make_optimizer, epoch_order, evaluate,
                       loss_and_errors, schedule)


def stack_key(config: Config) -> str | None:
    """Configs with the same key can be trained together; None: this one cannot be stacked
    (its model is not registered as stackable, it clips gradients over all its parameters, or
    it synchronises batch norm across processes)."""
    if config.model not in STACKABLE or config.grad_clip is not None or config.sync_bn:
        return None
    d = config.to_dict()
    d.pop("seed")
    d["data_args"] = {k: v for k, v in d["data_args"].items() if k != "split_seed"}
    return json.dumps(d, sort_keys=True)


def groups(configs: list[Config], dirs: list[Path], max_size: int = 16) -> list[list[int]]:
    """The indices of ``configs`` as units of work, in the order of their first member: a
    group of new runs with the same ``stack_key`` (at most ``max_size``), or a single run (an
    unstackable config, or a run already started, which ``train`` resumes on its own)."""
    units: list[list[int]] = []
    open_groups: dict[str, list[int]] = {}
    for k, (c, d) in enumerate(zip(configs, dirs)):
        key = stack_key(c)
        if key is not None:
            try:
                new = check_run_dir(c, d) == "new"
            except ValueError:
                new = False       # the single run reports the problem
            if new:
                g = open_groups.get(key)
                if g is not None and len(g) < max_size:
                    g.append(k)
                    continue
                g = [k]
                open_groups[key] = g
                units.append(g)
                continue
        units.append([k])
    return units


def _rows_equal_lengths(datasets: list[Dataset]) -> bool:
    first = datasets[0]
    return all(len(d.x_train) == len(first.x_train) and d.x_train.shape == first.x_train.shape
               and (d.lengths_train is None) == (first.lengths_train is None) for d in datasets)


def train_stacked(configs: list[Config], run_dirs: list[str | os.PathLike],
                  datasets: list[Dataset] | None = None) -> list[Path]:
    """Train ``configs`` (one arm's seeds: equal ``stack_key``, every run directory new) into
    ``run_dirs`` as one stacked model. Returns the run directories."""
    run_dirs = [Path(d) for d in run_dirs]
    keys = {stack_key(c) for c in configs}
    if len(keys) != 1 or None in keys:
        raise ValueError("train_stacked needs configs of one arm that differ only in their seed, "
                         "with a stackable model; train the others one by one with train().")
    for c in configs:
        c.validate()
    with contextlib.ExitStack() as stack:
        for d in run_dirs:
            stack.enter_context(claim(d, True))
        statuses = [check_run_dir(c, d) for c, d in zip(configs, run_dirs)]
        if any(s != "new" for s in statuses):
            raise ValueError("train_stacked starts new runs only; resume a started run with "
                             "train().")
        return _train_stacked(configs, run_dirs, datasets)


def _train_stacked(configs: list[Config], run_dirs: list[Path],
                   datasets: list[Dataset] | None) -> list[Path]:
    from torch.func import functional_call, stack_module_state, vmap

    S, cfg = len(configs), configs[0]
    device = resolve_device(cfg.device)
    ds = datasets or [load_for(c) for c in configs]
    if not _rows_equal_lengths(ds):
        raise ValueError("train_stacked needs training sets of one shape for every seed.")
    sched = schedule(cfg, len(ds[0].x_train))
    total, per_epoch = sched["total_steps"], sched["steps_per_epoch"]

    models, rngs = [], []
    for c, d in zip(configs, ds):
        torch.manual_seed(c.seed)           # as train() builds each seed's model
        models.append(build_model(c, d).to(device))
        rngs.append(torch.get_rng_state())  # what its own run's checkpoints hold
    for m in models:
        m.train()
    params, buffers = stack_module_state(models)
    names_p, names_b = list(params), list(buffers)
    optimizer = _make_optimizer(cfg, list(params.values()))
    base = models[0]        # functional_call swaps the stacked slices in, then restores it

    def one(p, b, x, lengths=None):
        return functional_call(base, (p, b), (x,), {} if lengths is None else
                               {"lengths": lengths})

    batched = getattr(base, "stacked_forward", None) or vmap(one, in_dims=(0, 0, 0),
                                                             randomness="error")
    batched_len = vmap(one, in_dims=(0, 0, 0, 0), randomness="error")

    for c, d, m in zip(configs, run_dirs, models):
        d.mkdir(parents=True, exist_ok=True)
        atomic_write_json(d / "config.json", c.to_dict())
        atomic_write_json(d / "env.json", {**environment(device), "world_size": 1,
                                           "stacked_seeds": [x.seed for x in configs]})
        atomic_write_text(d / "metrics.jsonl", "")

    def sync(s: int) -> None:
        """Seed s's slices of the stacked state into its own module (for scoring, checkpoints)."""
        with torch.no_grad():
            own_p = dict(models[s].named_parameters())
            own_b = dict(models[s].named_buffers())
            for n in names_p:
                own_p[n].copy_(params[n][s])
            for n in names_b:
                own_b[n].copy_(buffers[n][s])

    def seed_optimizer_state(s: int) -> dict:
        full = optimizer.state_dict()
        state = {}
        for i, st in full["state"].items():
            state[i] = {k: (v[s].clone() if torch.is_tensor(v) and v.dim() > 0 else
                            (v.clone() if torch.is_tensor(v) else v)) for k, v in st.items()}
        return {"state": state, "param_groups": full["param_groups"]}

    loss_sum = [0.0] * S
    loss_n = 0
    t_start, cpu_start = time.perf_counter(), time.process_time()
    orders: list[torch.Tensor] = []
    order_epoch, step = -1, 0
    seeds_lengths = ds[0].lengths_train is not None
    while step < total:
        epoch, pos = divmod(step, per_epoch)
        if epoch != order_epoch:
            orders = [epoch_order(len(d.x_train), c.seed, epoch) for c, d in zip(configs, ds)]
            order_epoch = epoch
        idx = [o[pos * cfg.batch_size:(pos + 1) * cfg.batch_size] for o in orders]
        x = torch.stack([d.x_train[i] for d, i in zip(ds, idx)]).to(device)
        ys = [d.y_train[i].to(device) for d, i in zip(ds, idx)]
        if seeds_lengths:
            lengths = torch.stack([d.lengths_train[i] for d, i in zip(ds, idx)])
            out = batched_len(params, buffers, x, lengths)
        else:
            out = batched(params, buffers, x)
        if ds[0].task == "classify":    # loss_and_errors' cross-entropy, every seed at once
            y = torch.stack(ys).reshape(S, -1)
            per = F.cross_entropy(out.reshape(-1, out.shape[-1]).float(), y.reshape(-1),
                                  ignore_index=-100, reduction="none").view(S, -1)
            loss = per.sum(1) / (y != -100).sum(1).float().clamp(min=1)
        else:
            losses = []
            for s in range(S):
                loss, _, scored = loss_and_errors(out[s], ys[s], ds[s])
                losses.append(loss / scored.float().clamp(min=1))
            loss = torch.stack(losses)
        optimizer.zero_grad(set_to_none=True)
        loss.sum().backward()
        optimizer.step()
        step += 1
        values = loss.detach().tolist()
        loss_sum = [a + b for a, b in zip(loss_sum, values)]
        loss_n += 1
        last = step == total
        evaluate_now = step % sched["eval_every"] == 0 or last
        checkpoint_now = step % sched["checkpoint_every"] == 0 or last
        if not (evaluate_now or checkpoint_now):
            continue
        for s in range(S):
            sync(s)
            if evaluate_now:
                test_loss, test_error = evaluate(models[s], ds[s], device)
                row = {"step": step, "epoch": step / per_epoch,
                       "train_loss": loss_sum[s] / loss_n, "test_loss": test_loss,
                       "test_error": test_error,
                       "wall_time": (time.perf_counter() - t_start) / S}
                row.update(_extra_metrics(models[s], ds[s], device))
                _append_row(run_dirs[s] / "metrics.jsonl", row)
        if evaluate_now:
            loss_sum, loss_n = [0.0] * S, 0
        if checkpoint_now:
            wall, cpu = time.perf_counter() - t_start, time.process_time() - cpu_start
            for s in range(S):
                save_checkpoint(run_dirs[s] / "checkpoint.pt", {
                    "format": CHECKPOINT_FORMAT, "config": configs[s].to_dict(), "step": step,
                    "epoch": step // per_epoch, "position_in_epoch": step % per_epoch,
                    "model": models[s].state_dict(), "optimizer": seed_optimizer_state(s),
                    "rng_torch": rngs[s], "rng_cuda": torch.cuda.get_rng_state(device)
                    if device.type == "cuda" else None,
                    "train_loss_sum": loss_sum[s], "train_loss_count": loss_n,
                    "wall_time": wall / S, "cpu_time": cpu / S})
    wall, cpu = time.perf_counter() - t_start, time.process_time() - cpu_start
    for d in run_dirs:
        write_cost(d, wall / S, cpu / S, total, stacked=S)
        rows = read_metrics(d)
        atomic_write_json(d / "done", rows[-1] if rows else {})
    return run_dirs


def sequential_forward(module: torch.nn.Module, params: dict, buffers: dict, x: torch.Tensor,
                       prefix: str = "") -> torch.Tensor:
    """The training-mode forward pass of S stacked copies of ``module`` on x (S, N, ...), with
    the copies' parameters and buffers stacked along a first dimension of S (``params``,
    ``buffers``: ``torch.func.stack_module_state``'s dicts, names under ``prefix``). Supports
    ``nn.Sequential`` of ``nn.Flatten``, ``nn.Linear``, ``nn.ReLU``, ``nn.Identity``,
    ``layernorm``'s ``LayerNorm`` and ``BatchNorm`` (batch statistics per copy and feature: one
    call over the S * C features; running statistics updated in place); anything else raises
    TypeError."""
    if isinstance(module, nn.Sequential):
        for name, child in module.named_children():
            x = sequential_forward(child, params, buffers, x, f"{prefix}{name}.")
        return x
    if isinstance(module, nn.Flatten) and module.start_dim == 1 and module.end_dim == -1:
        return x.flatten(2)
    if isinstance(module, nn.ReLU):
        return torch.relu(x)
    if isinstance(module, nn.Identity):
        return x
    if isinstance(module, nn.Linear):
        w = params[prefix + "weight"]
        b = params.get(prefix + "bias")
        if b is None:
            return torch.bmm(x, w.transpose(1, 2))
        return torch.baddbmm(b.unsqueeze(1), x, w.transpose(1, 2))
    if isinstance(module, LayerNorm) and x.dim() == 3 and len(module.normalized_shape) == 1:
        y = F.layer_norm(x, module.normalized_shape, None, None, module.eps)
        w, b = params.get(prefix + "weight"), params.get(prefix + "bias")
        if w is not None:
            y = torch.addcmul(b.unsqueeze(1), y, w.unsqueeze(1)) if b is not None \
                else y * w.unsqueeze(1)
        return y
    if (isinstance(module, BatchNorm) and x.dim() == 3 and module.track_running_stats
            and module.affine and module.momentum is not None):
        S, N, C = x.shape
        flat = x.transpose(0, 1).reshape(N, S * C)     # feature (s, c) -> column s * C + c
        LF.check_batch_size(flat, "BatchNorm")
        buffers[prefix + "num_batches_tracked"].add_(1)
        y = LF.fused_batch_norm(flat, buffers[prefix + "running_mean"].view(-1),
                                buffers[prefix + "running_var"].view(-1),
                                params[prefix + "weight"].reshape(-1),
                                params[prefix + "bias"].reshape(-1), training=True,
                                momentum=module.momentum, eps=module.eps,
                                unbiased=module.unbiased)
        return y.reshape(N, S, C).transpose(0, 1)
    raise TypeError(f"sequential_forward does not stack {type(module).__name__} ({prefix!r}); "
                    f"leave the model's stacked_forward out to train it under vmap.")


__all__ = ["groups", "sequential_forward", "stack_key", "train_stacked"]

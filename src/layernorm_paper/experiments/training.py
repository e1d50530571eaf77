"""``train(config, run_dir)``: one resumable, deterministic training run (the loop; the run
directory's format is ``rundir``, the distributed hooks ``runtime``).

Kill the process at any moment and call ``train`` again with the same config and directory: it
resumes from ``checkpoint.pt``, drops metrics rows past the checkpoint, and ends with exactly the
rows of an uninterrupted run (only ``wall_time`` differs). A finished run is returned as it is.

Data order: the training set is shuffled once per epoch by a generator seeded from (seed, epoch),
and step s trains on the batch at position s mod steps_per_epoch of epoch s // steps_per_epoch. So
the step alone fixes the position in the data order, and a resumed run sees the same batches.

Distributed training plugs in through ``Runtime`` (model wrapping, this rank's share of each global
batch, averaging the train loss across ranks, and ``is_writer``: only the writer touches files).
"""
from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from .._io import atomic_write_json, atomic_write_text, read_json
from ..data import Dataset
from .config import Config
from .holdout import load_for
from .registry import build_model
from .rundir import (CHECKPOINT_FORMAT, RunDirError, _append_row, check_run_dir, claim,
                     environment, load_checkpoint, read_metrics, save_checkpoint, write_cost)
from .runtime import Runtime, local_batch_size, resolve_device


def epoch_order(n: int, seed: int, epoch: int) -> torch.Tensor:
    """The shuffled order of the n training examples in ``epoch`` (a pure function of its args)."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n, generator=gen)


def schedule(config: Config, n_train: int, world_size: int = 1) -> dict:
    """Steps per epoch, total steps, and the evaluation / checkpoint intervals."""
    if config.batch_size > n_train:
        raise ValueError(f"batch_size {config.batch_size} is larger than the training set of "
                         f"{config.dataset!r} ({n_train} examples). Use --batch-size <= {n_train}.")
    local_batch_size(config.batch_size, world_size)
    per_epoch = n_train // config.batch_size     # drop the last partial batch
    total = config.steps if config.steps is not None else max(1, math.ceil(config.epochs * per_epoch))
    eval_every = config.eval_every or per_epoch
    return {"steps_per_epoch": per_epoch, "total_steps": total, "eval_every": eval_every,
            "checkpoint_every": config.checkpoint_every or eval_every}


# ----------------------------------------------------------------------------- loss and error
def loss_and_errors(out: torch.Tensor, y: torch.Tensor, dataset: Dataset):
    """(summed loss, number of errors, number of scored targets) of one batch.

    classify: cross-entropy over classes; targets (N,) or (N, T), -100 = not scored.
    regress: squared error; an error is |prediction - target| > dataset.tolerance.
    """
    if dataset.task == "classify":
        logits = out.reshape(-1, out.shape[-1]).float()
        target = y.reshape(-1)
        loss = F.cross_entropy(logits, target, ignore_index=-100, reduction="sum")
        scored = target != -100
        errors = ((logits.argmax(-1) != target) & scored).sum()
        return loss, errors, scored.sum()
    pred = out.reshape(-1).float()
    loss = F.mse_loss(pred, y.reshape(-1).float(), reduction="sum")
    errors = ((pred - y.reshape(-1)).abs() > dataset.tolerance).sum()
    return loss, errors, torch.tensor(pred.numel())


def _forward(model, x, lengths):
    return model(x) if lengths is None else model(x, lengths=lengths)


@torch.no_grad()
def evaluate(model: torch.nn.Module, dataset: Dataset, device: torch.device,
             batch_size: int = 1000) -> tuple[float, float]:
    """(mean test loss per scored target, test error rate), in eval mode."""
    was_training = model.training
    model.eval()
    loss_sum, err_sum, count = 0.0, 0, 0
    n = len(dataset.x_test)
    for start in range(0, n, batch_size):
        sl = slice(start, start + batch_size)
        lengths = None if dataset.lengths_test is None else dataset.lengths_test[sl]
        out = _forward(model, dataset.x_test[sl].to(device), lengths)
        loss, errors, scored = loss_and_errors(out, dataset.y_test[sl].to(device), dataset)
        loss_sum += float(loss)
        err_sum += int(errors)
        count += int(scored)
    model.train(was_training)
    return loss_sum / max(count, 1), err_sum / max(count, 1)


@torch.no_grad()
def _extra_metrics(model: torch.nn.Module, dataset: Dataset, device: torch.device,
                   probe: int = 256) -> dict:
    hook = getattr(model, "extra_metrics", None)
    if hook is None:
        return {}
    was_training = model.training
    model.eval()
    x = dataset.x_test[:probe].to(device)
    lengths = None if dataset.lengths_test is None else dataset.lengths_test[:probe]
    values = hook(x) if lengths is None else hook(x, lengths=lengths)
    model.train(was_training)
    return json.loads(json.dumps(values, default=_jsonable))


def _jsonable(v):
    if isinstance(v, torch.Tensor):
        return v.tolist()
    if isinstance(v, np.ndarray | np.generic):
        return v.tolist()
    raise TypeError(f"extra_metrics returned a {type(v).__name__}, which is not JSON "
                    f"serializable; return floats, lists or tensors.")


# ----------------------------------------------------------------------------- training
def _make_optimizer(config: Config, params):
    if config.optimizer == "adam":
        return torch.optim.Adam(params, lr=config.lr, weight_decay=config.weight_decay)
    if config.optimizer == "sgd":
        return torch.optim.SGD(params, lr=config.lr, weight_decay=config.weight_decay)
    return torch.optim.RMSprop(params, lr=config.lr, weight_decay=config.weight_decay)


def train(config: Config, run_dir: str | os.PathLike, *, runtime: Runtime | None = None,
          progress: bool | str = False, dataset: Dataset | None = None) -> Path:
    """Train ``config`` in ``run_dir`` (created, resumed, or returned as is when finished).

    progress: False, True, or a description for the tqdm bar (e.g. "run 2/6 layer-bs4-seed0").
    dataset: an already loaded dataset for ``config`` (saves reloading it across runs).
    Returns the run directory.
    """
    config.validate()
    with claim(Path(run_dir), (runtime or Runtime()).is_writer):
        return _train(config, run_dir, runtime=runtime, progress=progress, dataset=dataset)


def _train(config: Config, run_dir: str | os.PathLike, *, runtime: Runtime | None,
           progress: bool | str, dataset: Dataset | None) -> Path:
    rt = runtime or Runtime()
    run_dir = Path(run_dir)
    status = rt.from_writer(lambda: check_run_dir(config, run_dir))
    if status == "done":
        return run_dir
    device = resolve_device(config.device)
    ds = dataset if dataset is not None else load_for(config)
    sched = schedule(config, len(ds.x_train), rt.world_size)
    total, per_epoch = sched["total_steps"], sched["steps_per_epoch"]

    torch.manual_seed(config.seed)
    model = build_model(config, ds).to(device)
    optimizer = _make_optimizer(config, model.parameters())
    step, loss_sum, loss_n, elapsed, cpu_elapsed = 0, 0.0, 0, 0.0, 0.0
    ckpt_path, metrics_path = run_dir / "checkpoint.pt", run_dir / "metrics.jsonl"

    state = rt.from_writer(lambda: load_checkpoint(ckpt_path, config)
                           if status == "partial" and ckpt_path.exists() else None)
    if state is not None:
        try:
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
        except (RuntimeError, ValueError, KeyError) as err:
            raise RunDirError(f"checkpoint {ckpt_path} does not fit the model built for this "
                              f"config ({err}). Delete it to restart this run from step 0.") from err
        torch.set_rng_state(state["rng_torch"])
        if device.type == "cuda" and state.get("rng_cuda") is not None:
            torch.cuda.set_rng_state(state["rng_cuda"], device)
        step, elapsed = state["step"], state["wall_time"]
        cpu_elapsed = state.get("cpu_time", 0.0)    # absent in checkpoints of older versions
        loss_sum, loss_n = state["train_loss_sum"], state["train_loss_count"]
    if rt.is_writer:
        run_dir.mkdir(parents=True, exist_ok=True)
        if status == "new":
            atomic_write_json(run_dir / "config.json", config.to_dict())
            atomic_write_json(run_dir / "env.json",
                              {**environment(device), "world_size": rt.world_size})
        else:   # resume: keep the original env.json, record the resume in it
            env_path = run_dir / "env.json"
            env = read_json(env_path, "a JSON object of versions and device, written by the "
                            "runner", f"Delete {env_path} (the resume writes a new one) or "
                            f"restore it.", error=RunDirError)
            if env is None:
                env = environment(device)
            elif not isinstance(env, dict):
                raise RunDirError(f"{env_path} holds a JSON {type(env).__name__}; expected a "
                                  f"JSON object of versions and device, written by the runner. "
                                  f"Delete {env_path} (the resume writes a new one) or restore "
                                  f"it.")
            env.setdefault("resumes", []).append(
                {"step": step, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                 "device": str(device), "torch": torch.__version__,
                 "world_size": rt.world_size})
            atomic_write_json(env_path, env)
        # Rows past the checkpoint were computed by the killed process: drop them (they are
        # recomputed identically below), so no row is lost or duplicated.
        rows = [r for r in read_metrics(run_dir) if r["step"] <= step]
        text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows)
        if not metrics_path.exists() or metrics_path.read_text() != text:
            atomic_write_text(metrics_path, text)
    rt.barrier()

    train_model = rt.wrap_model(model, sync_bn=config.sync_bn)
    model.train()
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=total, initial=step, desc=progress if isinstance(progress, str) else
                   run_dir.name, unit="step", leave=False, disable=not rt.is_writer, dynamic_ncols=True)
    t_start = time.perf_counter() - elapsed
    cpu_start = time.process_time() - cpu_elapsed
    order, order_epoch = None, -1
    while step < total:
        epoch, pos = divmod(step, per_epoch)
        if epoch != order_epoch:
            order, order_epoch = epoch_order(len(ds.x_train), config.seed, epoch), epoch
        idx = rt.local_batch(order[pos * config.batch_size:(pos + 1) * config.batch_size])
        x, y = ds.x_train[idx].to(device), ds.y_train[idx].to(device)
        lengths = None if ds.lengths_train is None else ds.lengths_train[idx]
        loss, _, scored = loss_and_errors(_forward(train_model, x, lengths), y, ds)
        # Divide by the global batch's mean count of scored targets per rank: DDP's average of
        # the ranks' gradients is then the gradient of the mean over the whole global batch, even
        # when ranks hold different numbers of scored (not -100) targets.
        loss = loss / rt.mean(scored.float()).clamp(min=1)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if config.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        step += 1
        loss_value = loss.item()
        loss_sum, loss_n = loss_sum + loss_value, loss_n + 1
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{loss_value:.4f}", refresh=False)
        last = step == total
        if step % sched["eval_every"] == 0 or last:
            test_loss, test_error = evaluate(model, ds, device)
            row = {"step": step, "epoch": step / per_epoch,
                   "train_loss": rt.mean(loss_sum / loss_n), "test_loss": test_loss,
                   "test_error": test_error, "wall_time": time.perf_counter() - t_start}
            row.update(_extra_metrics(model, ds, device))
            loss_sum, loss_n = 0.0, 0
            if rt.is_writer:
                _append_row(metrics_path, row)
        if (step % sched["checkpoint_every"] == 0 or last) and rt.is_writer:
            save_checkpoint(ckpt_path, {
                "format": CHECKPOINT_FORMAT, "config": config.to_dict(), "step": step,
                "epoch": step // per_epoch, "position_in_epoch": step % per_epoch,
                "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "rng_torch": torch.get_rng_state(),
                "rng_cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
                "train_loss_sum": loss_sum, "train_loss_count": loss_n,
                "wall_time": time.perf_counter() - t_start,
                "cpu_time": time.process_time() - cpu_start})
    if bar is not None:
        bar.close()
    if rt.is_writer:
        write_cost(run_dir, time.perf_counter() - t_start, time.process_time() - cpu_start,
                   total)
        rows = read_metrics(run_dir)
        atomic_write_json(run_dir / "done", rows[-1] if rows else {})
    rt.barrier()
    return run_dir

"""``train(config, run_dir)``: one resumable, deterministic training run.

Run directory layout (contract 3 of the team brief):

    config.json      the resolved Config; a run directory belongs to exactly one config
    env.json         versions, device, git commit, start time, resumes
    metrics.jsonl    one JSON object per evaluation: step, epoch, train_loss, test_loss,
                     test_error, wall_time (+ the model's extra_metrics); appended line by line
    checkpoint.pt    model, optimizer, RNG states, step (= data order position), written atomically
    done             written last: the run finished (its content is the final metrics row)

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

import contextlib
import io
import json
import math
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from .._io import (atomic_write_bytes, atomic_write_json, atomic_write_text,
                   clean_stale_temp_files, exclusive_lock, read_metrics)
from ..data import Dataset, load_dataset
from .config import Config
from .registry import build_model

CHECKPOINT_FORMAT = 1
RUN_FILES = ("config.json", "env.json", "metrics.jsonl", "checkpoint.pt", "done")
CHECKPOINT_KEYS = ("format", "config", "step", "model", "optimizer", "rng_torch", "wall_time",
                   "train_loss_sum", "train_loss_count")
METRIC_KEYS = ("step", "epoch", "train_loss", "test_loss", "test_error", "wall_time")


class RunDirError(ValueError):
    """The run directory cannot be used for this config (another config, a bad checkpoint...)."""


@dataclass
class Runtime:
    """This process's place in a run. Single process by default; a distributed runtime sets rank
    and world_size and overrides the hooks below."""

    rank: int = 0
    world_size: int = 1

    @property
    def is_writer(self) -> bool:
        """Only the writer writes files (config, env, metrics, checkpoints, done)."""
        return self.rank == 0

    def wrap_model(self, model: torch.nn.Module, sync_bn: bool = False) -> torch.nn.Module:
        """The module the training step calls (e.g. DistributedDataParallel(model)). ``sync_bn``:
        batch-norm statistics over the global batch (one process already has all of it)."""
        return model

    def from_writer(self, fn):
        """``fn()`` computed by the writer and handed to every rank (its exception raised on every
        rank): the run directory's state as the writer sees it, so ranks without a shared
        filesystem resume from the writer's checkpoint."""
        return fn()

    def local_batch(self, indices: torch.Tensor) -> torch.Tensor:
        """This rank's share of a global batch of training-set indices."""
        return indices

    def mean(self, value):
        """Average a training statistic (a float, or a tensor of this rank) over ranks."""
        return value

    def barrier(self) -> None:
        """Wait for all ranks (after the writer wrote files others read)."""


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device 'cuda' was requested but torch.cuda.is_available() is False. "
                           "Use --device cpu (or auto), or install a CUDA build of torch.")
    return torch.device(name)


def epoch_order(n: int, seed: int, epoch: int) -> torch.Tensor:
    """The shuffled order of the n training examples in ``epoch`` (a pure function of its args)."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n, generator=gen)


def local_batch_size(global_batch: int, world_size: int) -> int:
    """Each rank's micro-batch: ``global_batch / world_size``, which must divide evenly.

    The batch size in a config is the global batch, so a run means the same optimization whatever
    the number of processes.
    """
    if global_batch % world_size:
        ok = [w for w in range(1, global_batch + 1) if global_batch % w == 0]
        raise ValueError(f"batch_size {global_batch} is the global batch and must split evenly "
                         f"over the {world_size} processes (WORLD_SIZE={world_size}), received "
                         f"{global_batch} % {world_size} = {global_batch % world_size}. Use a "
                         f"process count that divides it ({ok}) or a batch size that is a multiple "
                         f"of {world_size}.")
    return global_batch // world_size


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


# ----------------------------------------------------------------------------- run directory
def _append_row(path: Path, row: dict) -> None:
    # One write of one complete line, then fsync: a kill leaves at most a torn last line, which
    # read_metrics ignores and a resume truncates.
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def git_commit() -> str | None:
    """The checkout's commit, or None outside a git checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent,
                             capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or None if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def environment(device: torch.device) -> dict:
    from importlib.metadata import PackageNotFoundError, version

    from .. import __version__
    try:
        sklearn_version = version("scikit-learn")
    except PackageNotFoundError:
        sklearn_version = None
    return {"layernorm": __version__, "python": sys.version.split()[0], "torch": torch.__version__,
            "numpy": np.__version__, "sklearn": sklearn_version,
            "platform": platform.platform(), "device": str(device),
            "cuda_device": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
            "torch_threads": torch.get_num_threads(), "git_commit": git_commit(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "resumes": []}


def check_run_dir(config: Config, run_dir: str | os.PathLike) -> str:
    """"new", "partial" or "done" for ``config`` in ``run_dir``; RunDirError if the directory
    belongs to another config or holds files that are not a run's."""
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise RunDirError(f"run directory {run_dir} exists and is not a directory. Pass another "
                          f"--out.")
    cfg_path = run_dir / "config.json"
    if not cfg_path.exists():
        foreign = sorted(p.name for p in run_dir.iterdir() if not p.name.startswith(".")) \
            if run_dir.exists() else []
        if foreign:
            raise RunDirError(f"run directory {run_dir} is not empty ({', '.join(foreign[:5])}) "
                              f"and holds no config.json, so it is not a layernorm run. Pass "
                              f"another --out; nothing there was changed.")
        return "new"
    try:
        stored = json.loads(cfg_path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise RunDirError(f"cannot read {cfg_path}: {err}. Delete the run directory to start "
                          f"over, or pass another --out.") from err
    if stored != config.to_dict():
        diff = {k: (stored.get(k), v) for k, v in config.to_dict().items() if stored.get(k) != v}
        raise RunDirError(f"run directory {run_dir} holds another config; differences "
                          f"(stored, requested): {diff}. Pass another --out, or delete the "
                          f"directory to replace that run.")
    return "done" if (run_dir / "done").exists() else "partial"


def _save_checkpoint(path: Path, state: dict) -> None:
    buf = io.BytesIO()
    torch.save(state, buf)
    atomic_write_bytes(path, buf.getvalue())


def load_checkpoint(path: str | os.PathLike, config: Config) -> dict:
    """Read ``checkpoint.pt`` and check it belongs to ``config``; clear errors otherwise."""
    path = Path(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises several types for a damaged file
        first = (str(err).strip().splitlines() or [""])[0][:200]
        raise RunDirError(f"cannot read checkpoint {path} ({type(err).__name__}: {first}). It is "
                          f"damaged or not a layernorm checkpoint. Delete it to restart this run "
                          f"from step 0 (its metrics rows are then recomputed).") from err
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise RunDirError(f"checkpoint {path} is not a layernorm checkpoint of format "
                          f"{CHECKPOINT_FORMAT}. Delete it to restart this run from step 0.")
    missing = [k for k in CHECKPOINT_KEYS if k not in state]
    if missing:
        raise RunDirError(f"checkpoint {path} lacks {missing}; expected a layernorm checkpoint "
                          f"with {list(CHECKPOINT_KEYS)}. Delete it to restart this run from "
                          f"step 0.")
    if state.get("config") != config.to_dict():
        raise RunDirError(f"checkpoint {path} was written for another config than "
                          f"{path.parent / 'config.json'}. Delete the checkpoint (restart from "
                          f"step 0) or the whole run directory.")
    return state


# ----------------------------------------------------------------------------- training
def _make_optimizer(config: Config, params):
    if config.optimizer == "adam":
        return torch.optim.Adam(params, lr=config.lr, weight_decay=config.weight_decay)
    if config.optimizer == "sgd":
        return torch.optim.SGD(params, lr=config.lr, weight_decay=config.weight_decay)
    return torch.optim.RMSprop(params, lr=config.lr, weight_decay=config.weight_decay)


@contextlib.contextmanager
def _claim(run_dir: Path, is_writer: bool):
    """Hold an exclusive lock on ``run_dir`` while training it (two processes writing one run
    would interleave rows), then clear temporary files a killed writer left behind. The lock file
    sits next to the run directory; the OS releases it when the process dies, even by kill -9."""
    if not is_writer:
        yield
        return
    with exclusive_lock(run_dir.parent / f".{run_dir.name}.lock",
                        f"another process (pid {{pid}}) is training {run_dir} right now. Wait for "
                        f"it, or use another --out.", error=RunDirError):
        clean_stale_temp_files(run_dir)       # from atomic writes cut short by a kill
        yield


def train(config: Config, run_dir: str | os.PathLike, *, runtime: Runtime | None = None,
          progress: bool | str = False, dataset: Dataset | None = None) -> Path:
    """Train ``config`` in ``run_dir`` (created, resumed, or returned as is when finished).

    progress: False, True, or a description for the tqdm bar (e.g. "run 2/6 layer-bs4-seed0").
    dataset: an already loaded dataset for ``config`` (saves reloading it across runs).
    Returns the run directory.
    """
    config.validate()
    with _claim(Path(run_dir), (runtime or Runtime()).is_writer):
        return _train(config, run_dir, runtime=runtime, progress=progress, dataset=dataset)


def _train(config: Config, run_dir: str | os.PathLike, *, runtime: Runtime | None,
           progress: bool | str, dataset: Dataset | None) -> Path:
    rt = runtime or Runtime()
    run_dir = Path(run_dir)
    status = rt.from_writer(lambda: check_run_dir(config, run_dir))
    if status == "done":
        return run_dir
    device = resolve_device(config.device)
    ds = dataset if dataset is not None else load_dataset(config.dataset, **config.data_args)
    sched = schedule(config, len(ds.x_train), rt.world_size)
    total, per_epoch = sched["total_steps"], sched["steps_per_epoch"]

    torch.manual_seed(config.seed)
    model = build_model(config, ds).to(device)
    optimizer = _make_optimizer(config, model.parameters())
    step, loss_sum, loss_n, elapsed = 0, 0.0, 0, 0.0
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
        loss_sum, loss_n = state["train_loss_sum"], state["train_loss_count"]
    if rt.is_writer:
        run_dir.mkdir(parents=True, exist_ok=True)
        if status == "new":
            atomic_write_json(run_dir / "config.json", config.to_dict())
            atomic_write_json(run_dir / "env.json",
                              {**environment(device), "world_size": rt.world_size})
        else:   # resume: keep the original env.json, record the resume in it
            env_path = run_dir / "env.json"
            env = json.loads(env_path.read_text()) if env_path.exists() else environment(device)
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
            _save_checkpoint(ckpt_path, {
                "format": CHECKPOINT_FORMAT, "config": config.to_dict(), "step": step,
                "epoch": step // per_epoch, "position_in_epoch": step % per_epoch,
                "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "rng_torch": torch.get_rng_state(),
                "rng_cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
                "train_loss_sum": loss_sum, "train_loss_count": loss_n,
                "wall_time": time.perf_counter() - t_start})
    if bar is not None:
        bar.close()
    if rt.is_writer:
        rows = read_metrics(run_dir)
        atomic_write_json(run_dir / "done", rows[-1] if rows else {})
    rt.barrier()
    return run_dir

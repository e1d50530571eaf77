"""The run directory: its files, the checks that a directory belongs to a config, checkpoints and
the environment record. The metrics reader is ``layernorm_paper._io.read_metrics`` (the one reader
of the project, also the report's), re-exported here.

    config.json      the resolved Config; a run directory belongs to exactly one config
    env.json         versions, device, git commit, start time, resumes, the CPU's vector features
                     and the BLAS build (``this_machine``: float rounding depends on both)
    metrics.jsonl    one JSON object per evaluation: step, epoch, train_loss, test_loss,
                     test_error, wall_time (+ the model's extra_metrics); appended line by line
    checkpoint.pt    model, optimizer, RNG states, step (= data order position), written atomically
    cost.json        what training cost: wall_s, cpu_s (this process, every torch thread, summed
                     over resumes), steps, torch_threads, stacked (seeds trained together)
    done             written last: the run finished (its content is the final metrics row)

See docs/runner.md.
"""
from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from .._io import (MetricsError, atomic_write_bytes, atomic_write_json, clean_stale_temp_files,
                   exclusive_lock, load_weights, read_jsonl, read_metrics)
from .config import Config

CHECKPOINT_FORMAT = 1
RUN_FILES = ("config.json", "env.json", "metrics.jsonl", "checkpoint.pt", "cost.json", "done")
CHECKPOINT_KEYS = ("format", "config", "step", "model", "optimizer", "rng_torch", "wall_time",
                   "train_loss_sum", "train_loss_count")
METRIC_KEYS = ("step", "epoch", "train_loss", "test_loss", "test_error", "wall_time")


class RunDirError(ValueError):
    """The run directory cannot be used for this config (another config, a bad checkpoint...)."""


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


# The machine's arithmetic: the CPU's vector features and the BLAS / LAPACK build PyTorch
# uses. Float rounding depends on both (a different kernel can sum in another order), so runs
# on another CPU act as new seeds: env.json records them and the report states them.
# The flags that decide which kernels PyTorch and its BLAS pick (x86 /proc/cpuinfo names; the
# Arm ones as Linux reports them).
FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
         "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "asimd", "sve", "sve2")


def cpu_flags(cpuinfo: str | None = None) -> list[str]:
    """The subset ``FLAGS`` of the CPU's feature flags (the first processor's ``flags`` or
    ``Features`` line of /proc/cpuinfo); [] where it cannot be read."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            return []
    m = re.search(r"^(?:flags|Features)\s*:\s*(.*)$", cpuinfo, re.MULTILINE)
    have = set(m.group(1).split()) if m else set()
    return [f for f in FLAGS if f in have]


def blas_summary(config: str) -> str:
    """The BLAS / LAPACK lines of ``torch.__config__.show()``: BLAS_INFO, LAPACK_INFO, the MKL
    or OpenBLAS version line, and the CPU capability it reports."""
    out = []
    for key in ("BLAS_INFO", "LAPACK_INFO"):
        m = re.search(rf"{key}=([^,\s]+)", config)
        if m:
            out.append(f"{key}={m.group(1)}")
    for line in config.splitlines():
        t = line.strip(" -\t")
        if re.search(r"Math Kernel Library|OpenBLAS|BLIS|Accelerate|MKL-DNN|oneDNN", t):
            out.append(t)
    return "; ".join(out) or "not reported by torch.__config__.show()"


@functools.lru_cache(maxsize=1)
def this_machine() -> dict[str, str]:
    """This process's CPU capability (``torch.backends.cpu.get_cpu_capability()``), CPU flags
    and BLAS build."""
    try:
        capability = torch.backends.cpu.get_cpu_capability()
    except (AttributeError, RuntimeError):
        capability = "not reported"
    return {"cpu_capability": str(capability), "cpu_flags": " ".join(cpu_flags()) or "unknown",
            "blas": blas_summary(torch.__config__.show())}


def environment(device: torch.device) -> dict:
    from importlib.metadata import PackageNotFoundError, version

    from layernorm import __version__
    try:
        sklearn_version = version("scikit-learn")
    except PackageNotFoundError:
        sklearn_version = None
    return {"layernorm": __version__, "python": sys.version.split()[0], "torch": torch.__version__,
            "numpy": np.__version__, "sklearn": sklearn_version,
            "platform": platform.platform(), "device": str(device),
            "cuda_device": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
            "torch_threads": torch.get_num_threads(), "git_commit": git_commit(),
            **this_machine(),
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
    if not isinstance(stored, dict):
        raise RunDirError(f"{cfg_path} holds a JSON {type(stored).__name__}, expected a JSON object "
                          f"(the run's config, as layernorm writes it). Delete the run directory "
                          f"{run_dir} to train that run again, or pass another --out.")
    if stored != config.to_dict():
        diff = {k: (stored.get(k), v) for k, v in config.to_dict().items() if stored.get(k) != v}
        raise RunDirError(f"run directory {run_dir} holds another config; differences "
                          f"(stored, requested): {diff}. Pass another --out, or delete the "
                          f"directory to replace that run.")
    return "done" if (run_dir / "done").exists() else "partial"


def write_cost(run_dir: str | os.PathLike, wall_s: float, cpu_s: float, steps: int,
               stacked: int = 1) -> None:
    """``cost.json``: the run's training wall time and CPU time (user + system of the process
    that trained it, every torch thread; summed over resumes). For ``stacked`` seeds trained
    together as one model, each run gets 1/stacked of the group's cost."""
    atomic_write_json(Path(run_dir) / "cost.json",
                      {"wall_s": round(wall_s, 3), "cpu_s": round(cpu_s, 3), "steps": steps,
                       "torch_threads": torch.get_num_threads(), "stacked": stacked})


def save_checkpoint(path: str | os.PathLike, state: dict) -> None:
    """``torch.save`` of ``state`` to ``path``, atomically."""
    buf = io.BytesIO()
    torch.save(state, buf)
    atomic_write_bytes(path, buf.getvalue())


# What the runner writes into a checkpoint (``load_checkpoint`` checks the types, not only the keys)
def _count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


_CHECKPOINT_TYPES = {"step": _count, "train_loss_count": _count, "wall_time": _number,
                     "cpu_time": _number, "train_loss_sum": _number, "model": lambda v: isinstance(v, dict),
                     "optimizer": lambda v: isinstance(v, dict),
                     "rng_torch": lambda v: torch.is_tensor(v) and v.dtype == torch.uint8}


def load_checkpoint(path: str | os.PathLike, config: Config) -> dict:
    """Read ``checkpoint.pt`` and check it belongs to ``config``; clear errors otherwise."""
    path = Path(path)
    state = load_weights(path, "It is damaged or not a layernorm checkpoint. Delete it to "
                         "restart this run from step 0 (its metrics rows are then recomputed).",
                         error=RunDirError)
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise RunDirError(f"checkpoint {path} is not a layernorm checkpoint of format "
                          f"{CHECKPOINT_FORMAT}. Delete it to restart this run from step 0.")
    missing = [k for k in CHECKPOINT_KEYS if k not in state]
    if missing:
        raise RunDirError(f"checkpoint {path} lacks {missing}; expected a layernorm checkpoint "
                          f"with {list(CHECKPOINT_KEYS)}. Delete it to restart this run from "
                          f"step 0.")
    wrong = [f"{k}={state[k]!r:.40} ({type(state[k]).__name__})"
             for k, ok in _CHECKPOINT_TYPES.items() if k in state and not ok(state[k])]
    if wrong:
        raise RunDirError(f"checkpoint {path} holds {', '.join(wrong)}; expected step and "
                          f"train_loss_count integers >= 0, wall_time, cpu_time and "
                          f"train_loss_sum numbers, model and optimizer dicts, rng_torch a "
                          f"uint8 tensor, as layernorm writes them. Delete it to restart this "
                          f"run from step 0.")
    if state.get("config") != config.to_dict():
        raise RunDirError(f"checkpoint {path} was written for another config than "
                          f"{path.parent / 'config.json'}. Delete the checkpoint (restart from "
                          f"step 0) or the whole run directory.")
    return state


@contextlib.contextmanager
def claim(run_dir: Path, is_writer: bool):
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


__all__ = ["CHECKPOINT_FORMAT", "CHECKPOINT_KEYS", "FLAGS", "METRIC_KEYS", "RUN_FILES",
           "MetricsError", "RunDirError", "blas_summary", "check_run_dir", "claim", "cpu_flags",
           "environment", "git_commit", "load_checkpoint", "read_jsonl", "read_metrics",
           "save_checkpoint", "this_machine", "write_cost"]

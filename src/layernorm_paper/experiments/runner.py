"""Run many configs: one after another or in parallel processes; a failed run is reported and the
others continue; finished runs are reused."""
from __future__ import annotations

import json
import os
import time
import traceback
from dataclasses import dataclass, fields, replace
from pathlib import Path

from .config import Config
from .names import check_name
from .registry import MODEL_NORMS, MODELS, register_model
from .rundir import check_run_dir, read_metrics
from .runtime import Runtime
from .training import train


@dataclass
class RunResult:
    config: Config
    run_dir: Path
    status: str            # "done" (trained now), "skipped" (finished before), "failed"
    error: str = ""
    seconds: float = 0.0

    def final(self) -> dict:
        rows = read_metrics(self.run_dir) if self.status != "failed" else []
        return rows[-1] if rows else {}


def override(configs: list[Config], **values) -> list[Config]:
    """The configs for user-chosen field values (``layernorm run --norm/--batch-size/--seed``).

    For each field and each value: if some configs already have that value, those configs are
    kept (so ``batch_size=[4]`` on an experiment sweeping 4 and 128 keeps exactly its batch-4
    runs, with whatever else the experiment pairs with batch 4); otherwise every config is copied
    with the field replaced (``norm=["rms"]`` adds RMSNorm to an experiment without it). Several
    values: the union, in the order given. Exact duplicates are dropped. ``None`` or an empty list
    leaves the field alone.
    """
    names = {f.name for f in fields(Config)}
    for key, vals in values.items():
        if key not in names:
            raise ValueError(f"cannot override unknown config field {key!r}; fields are "
                             f"{sorted(names)}.")
        if not vals:
            continue
        chosen = []
        for v in vals:
            same = [c for c in configs if getattr(c, key) == v]
            chosen += same or [replace(c, **{key: v}) for c in configs]
        configs = chosen
    unique, seen = [], set()
    for c in configs:
        key = json.dumps(c.to_dict(), sort_keys=True)
        if key not in seen:
            seen.add(key)
            unique.append(c)
    return unique


def check_unique_run_dirs(configs: list[Config], out: str | os.PathLike) -> None:
    """Two different configs must not share a run directory (neither would be reusable)."""
    seen: dict[Path, Config] = {}
    for c in configs:
        d = run_dir_for(c, out)
        if d in seen and seen[d].to_dict() != c.to_dict():
            a, b = seen[d].to_dict(), c.to_dict()
            diff = {k: (a[k], b[k]) for k in a if a[k] != b[k]}
            raise ValueError(f"two different configs would share the run directory {d}; they "
                             f"differ in {diff}. Choose values the experiment itself uses (see "
                             f"`layernorm list`), or give the configs different tags.")
        seen[d] = c


def run_dir_for(config: Config, out: str | os.PathLike, world_size: int = 1) -> Path:
    """``OUT/<experiment>/<run name>``; ad-hoc configs (no experiment) go to ``OUT/adhoc``.

    A run on W > 1 processes (torchrun) is ``<run name>-wW``: with batch norm its numbers depend
    on W, so it never reuses or resumes a run made with another number of processes.
    """
    check_name(config.experiment, "experiment", empty=True)
    check_name(config.tag, "tag", empty=True)
    name = config.run_name() + (f"-w{world_size}" if world_size > 1 else "")
    path = Path(out) / (config.experiment or "adhoc") / name
    root = Path(out).resolve()
    if not path.resolve().is_relative_to(root):   # a symlink inside OUT pointing elsewhere
        raise ValueError(f"the run directory {path} resolves to {path.resolve()}, outside the "
                         f"output folder {root}. Remove the link, or pass another --out.")
    return path


class _DatasetCache:
    """Load each (dataset, data_args) once per process."""

    def __init__(self):
        self._cache = {}

    def get(self, config: Config):
        from .holdout import load_for
        key = (config.dataset, json.dumps(config.data_args, sort_keys=True))
        if key not in self._cache:
            self._cache = {key: load_for(config)}  # keep one
        return self._cache[key]


def _run_one(config: Config, run_dir: Path, desc: str | bool, cache: _DatasetCache | None = None,
             runtime: Runtime | None = None) -> RunResult:
    t0 = time.perf_counter()
    rt = runtime or Runtime()
    try:
        if rt.from_writer(lambda: check_run_dir(config, run_dir)) == "done":
            return RunResult(config, run_dir, "skipped")
        ds = cache.get(config) if cache is not None else None
        train(config, run_dir, runtime=rt, progress=desc, dataset=ds)
        return RunResult(config, run_dir, "done", seconds=time.perf_counter() - t0)
    except Exception as err:  # report and let the other runs continue
        if rt.world_size > 1:
            # Under torchrun a rank that moved on alone would wait forever on the others: stop
            # this process; torchrun then stops the group, and the same command resumes.
            raise
        from ..data import DownloadError
        expected = isinstance(err, (ValueError, DownloadError))   # messages that say the fix
        detail = "" if expected else "\n" + traceback.format_exc(limit=-3)
        return RunResult(config, run_dir, "failed", f"{type(err).__name__}: {err}{detail}",
                         time.perf_counter() - t0)


def _run_group(configs: list[Config], dirs: list[Path], cache: _DatasetCache | None = None
               ) -> list[RunResult]:
    """One arm's new seeds trained together (``stacked.train_stacked``); a failed group is one
    failure per run, with the same error."""
    from .holdout import load_for
    from .stacked import train_stacked
    t0 = time.perf_counter()
    try:
        datasets = [load_for(c) for c in configs]
        train_stacked(configs, dirs, datasets)
        seconds = (time.perf_counter() - t0) / len(configs)
        return [RunResult(c, d, "done", seconds=seconds) for c, d in zip(configs, dirs)]
    except Exception as err:  # report and let the other runs continue
        from ..data import DownloadError
        expected = isinstance(err, (ValueError, DownloadError))
        detail = "" if expected else "\n" + traceback.format_exc(limit=-3)
        return [RunResult(c, d, "failed", f"{type(err).__name__}: {err}{detail}",
                          (time.perf_counter() - t0) / len(configs))
                for c, d in zip(configs, dirs)]


def _exit_with_parent(parent_pid: int, interval: float = 0.5) -> None:
    """Worker initializer: end this worker when the parent process is gone.

    A parent stopped by SIGTERM or SIGKILL runs no clean-up, and its ProcessPoolExecutor workers
    would train on unattended. Each run resumes from its checkpoint, so ending them is safe.
    """
    import threading
    import time

    def watch():
        while os.getppid() == parent_pid:
            time.sleep(interval)
        os._exit(1)
    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _run_in_child(config_dict: dict, run_dir: str, threads: int, builder,
                  norms: tuple[str, ...] | None) -> RunResult:
    """One run in a spawned worker process, which starts with empty registries. ``builder`` is the
    config's model builder, sent by reference: unpickling it imported the module that defines
    it, and with it that module's registrations; a builder that was registered by a call rather
    than at import is registered here under the parent's name and norms."""
    import torch

    config = Config.from_dict(config_dict)
    if builder is not None and config.model not in MODELS:
        register_model(config.model, norms=norms)(builder)
    torch.set_num_threads(threads)
    return _run_one(config, Path(run_dir), False)


def _run_group_in_child(config_dicts: list[dict], run_dirs: list[str], threads: int, builder,
                        norms: tuple[str, ...] | None) -> list[RunResult]:
    """One stacked group of seeds in a spawned worker process (see ``_run_in_child``)."""
    import torch

    configs = [Config.from_dict(d) for d in config_dicts]
    if builder is not None and configs[0].model not in MODELS:
        register_model(configs[0].model, norms=norms, stackable=True)(builder)
    torch.set_num_threads(threads)
    return _run_group(configs, [Path(d) for d in run_dirs])


def _describe(i: int, n: int, r: RunResult) -> str:
    head = f"[{i}/{n}] {r.run_dir}"
    if r.status == "failed":
        return f"{head}: FAILED: {r.error}"
    if r.status == "skipped":
        return f"{head}: finished earlier, reused"
    f = r.final()
    return (f"{head}: done in {r.seconds:.1f} s, step {f.get('step')}, train_loss "
            f"{f.get('train_loss', float('nan')):.4f}, test_error {f.get('test_error', float('nan')):.4f}")


def run_configs(configs: list[Config], out: str | os.PathLike, *, jobs: int = 1,
                progress: bool = True, log=print, threads: int | None = None,
                runtime: Runtime | None = None, stack: bool = True) -> list[RunResult]:
    """Train every config into ``run_dir_for(config, out)``; never raises for a failed run.

    jobs > 1 runs that many processes at once, each with ``threads`` torch threads (default
    cpu_count // jobs). Raises ValueError before training anything if two different configs
    would share a run directory.
    ``log`` gets one line per finished run. Returns the results in the order of ``configs``.
    ``runtime``: this process's rank under torchrun (``layernorm_paper.distributed.runtime()``); every
    rank trains every config together, one after another, and only the writer logs.
    ``stack``: train the new seeds of one arm together as one stacked model where the model is
    registered ``stackable`` (``experiments.stacked``; not under torchrun). The run directories
    are the same either way.
    """
    rt = runtime or Runtime()
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, received {jobs}. Use --jobs 1 to run one at a time.")
    if jobs > 1 and rt.world_size > 1:
        raise ValueError(f"--jobs {jobs} cannot be combined with torchrun's {rt.world_size} "
                         f"processes (every rank trains the same run). Use --jobs 1 under "
                         f"torchrun.")
    check_unique_run_dirs(configs, out)
    n = len(configs)
    dirs = [run_dir_for(c, out, rt.world_size) for c in configs]
    results: list[RunResult | None] = [None] * n
    if stack and rt.world_size == 1:
        from .stacked import groups
        units = groups(configs, dirs)
    else:
        units = [[k] for k in range(n)]
    if jobs == 1 or len(units) <= 1:
        cache = _DatasetCache()
        i = 0
        for unit in units:
            if len(unit) > 1:
                found = _run_group([configs[k] for k in unit], [dirs[k] for k in unit])
            else:
                k = unit[0]
                found = [_run_one(configs[k], dirs[k], f"run {k + 1}/{n} "
                                  f"{configs[k].experiment}/{dirs[k].name}" if progress else False,
                                  cache, rt)]
            for k, r in zip(unit, found):
                i += 1
                results[k] = r
                if rt.is_writer:
                    log(_describe(i, n, r))
        return results
    from tqdm import tqdm
    threads = threads or max(1, (os.cpu_count() or 1) // jobs)
    bar = tqdm(total=n, desc=f"runs ({jobs} processes)", unit="run", disable=not progress,
               dynamic_ncols=True)
    finished = 0

    def record(k: int, result: RunResult) -> None:
        nonlocal finished
        finished += 1
        results[k] = result
        bar.update(1)
        bar.set_postfix_str(f"last: {configs[k].run_name()} {result.status}")
        (bar.write if progress else log)(_describe(finished, n, result))

    _run_pool(configs, dirs, jobs, threads, record, units)
    bar.close()
    return results


def _run_pool(configs: list[Config], dirs: list[Path], jobs: int, threads: int, record,
              units: list[list[int]] | None = None) -> None:
    """Train configs[k] into dirs[k] in worker processes, ``jobs`` at once; ``record(k, result)``
    once per run.

    A worker that dies (killed for memory, a signal, a crash in native code) breaks the whole
    ``ProcessPoolExecutor``: every run in flight then raises ``BrokenProcessPool``, so which run
    killed it is unknown. Those runs are retried one at a time in a pool of one worker: a run
    whose worker dies there is the one that kills it and is FAILED; the others resume from their
    checkpoints and finish. Then the remaining runs go on with ``jobs`` workers.
    """
    import multiprocessing as mp
    from collections import deque
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    pending = deque(units if units is not None else [[k] for k in range(len(configs))])
    suspects: deque = deque()
    while pending or suspects:
        queue = suspects if suspects else pending
        width = 1 if queue is suspects else jobs
        with ProcessPoolExecutor(max_workers=width, mp_context=mp.get_context("spawn"),
                                 initializer=_exit_with_parent, initargs=(os.getpid(),)) as pool:
            in_flight: dict = {}
            broken = False
            while (queue or in_flight) and not broken:
                while queue and len(in_flight) < width:
                    unit = queue.popleft()
                    c = configs[unit[0]]
                    try:
                        if len(unit) > 1:
                            fut = pool.submit(_run_group_in_child,
                                              [configs[k].to_dict() for k in unit],
                                              [str(dirs[k]) for k in unit], threads,
                                              MODELS.get(c.model), MODEL_NORMS.get(c.model))
                        else:
                            fut = pool.submit(_run_in_child, c.to_dict(), str(dirs[unit[0]]),
                                              threads, MODELS.get(c.model),
                                              MODEL_NORMS.get(c.model))
                    except BrokenProcessPool:   # a worker died since the last wait: this unit
                        queue.appendleft(unit)  # never started; it goes on in the next pool
                        broken = True
                        break
                    in_flight[fut] = unit
                if broken:
                    break
                done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
                for fut in done:
                    unit = in_flight.pop(fut)
                    try:
                        found = fut.result()
                        for k, r in zip(unit, found if len(unit) > 1 else [found]):
                            record(k, r)
                    except BrokenProcessPool:
                        broken = True
                        if width == 1 and len(unit) == 1:   # alone in its pool: it killed it
                            record(unit[0], RunResult(configs[unit[0]], dirs[unit[0]], "failed",
                                                      _DIED))
                        else:
                            suspects.extend([k] for k in unit)
                    except Exception as err:  # the result could not be sent back
                        for k in unit:
                            record(k, RunResult(configs[k], dirs[k], "failed", f"worker process "
                                                f"failed: {type(err).__name__}: {err}"))
        if broken:  # the pool is shut down: the runs it stopped are retried, those that
            for fut, unit in in_flight.items():     # finished first are recorded
                if not fut.cancelled() and fut.exception() is None:
                    found = fut.result()
                    for k, r in zip(unit, found if len(unit) > 1 else [found]):
                        record(k, r)
                else:
                    suspects.extend([k] for k in unit)


_DIED = ("worker process died while training this run (killed by a signal such as SIGKILL, e.g. "
         "by the out-of-memory killer, or a crash in native code); the other runs went on. Run "
         "it with fewer --jobs or a smaller --scale; rerunning the same command resumes "
         "it from its checkpoint.")

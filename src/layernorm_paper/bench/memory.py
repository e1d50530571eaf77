"""Peak memory of one call, for the ``bench rnn`` tables."""
from __future__ import annotations

import contextlib
import os

import torch


@contextlib.contextmanager
def _quiet_stderr():
    """The CPU profiler's C++ side prints start/stop lines on stderr; hide them while it runs."""
    try:
        fd = os.dup(2)
    except OSError:  # pragma: no cover - no stderr to silence
        yield
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(fd, 2)
        os.close(fd)


def peak_memory_mb(fn, device: str = "cpu") -> float:
    """Peak MiB allocated by torch while ``fn()`` runs, above what was allocated before it.

    On CUDA ``torch.cuda.max_memory_allocated``; on CPU, torch has no allocator statistics, so
    ``fn`` runs once under ``torch.profiler`` with ``profile_memory=True`` and the peak of the
    running sum of its allocation/free events is reported (the same quantity as the CUDA number).
    The fused kernels' reusable workspace is emptied first, so the buffers it hands out count as
    allocated during ``fn()`` (as they are on a first call)."""
    from layernorm.rnn import fused
    fused.release_workspace()
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fn()
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - base) / 2 ** 20
    from torch.profiler import ProfilerActivity, profile
    with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
                    key=lambda e: e.start_ns())
    current = peak = 0
    for e in events:
        current += e.nbytes()
        peak = max(peak, current)
    return peak / 2 ** 20

"""The comparison harness of ``layernorm bench`` and ``benchmarks/``: medians over interleaved
rounds after warm-up, ratios against an anchor measured in the same run, and the line that says
where a table was measured. Never used by tests to assert a speed."""
from __future__ import annotations

import contextlib
import os
import statistics
import time
from typing import Callable, Hashable

import torch

# The clocks a benchmark can time with: wall time, or this process's CPU time (stable on a
# machine shared with other jobs when torch uses one thread).
CLOCKS = {"wall": time.perf_counter, "process": time.process_time}


def _sync(device: torch.device | str | None) -> None:
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def compare(fns: dict[Hashable, Callable[[], object]], *, warmup: int = 3, repeat: int = 15,
            device: torch.device | str | None = None,
            clock: Callable[[], float] = time.perf_counter) -> dict[Hashable, float]:
    """Median milliseconds of each function. Rounds interleave the candidates, in alternating order,
    so that drift in the machine's speed (other load, frequency) and the order hit all alike.
    ``clock``: wall time by default; ``time.process_time`` counts only this process's CPU time
    (stable on a machine shared with other jobs when torch uses one thread)."""
    if repeat < 1 or warmup < 0:
        raise ValueError(f"compare expected repeat >= 1 and warmup >= 0, received repeat={repeat}, "
                         f"warmup={warmup}. Pass e.g. repeat=5, warmup=2.")
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times: dict[Hashable, list[float]] = {name: [] for name in fns}
    order = list(fns.items())
    for r in range(repeat):
        for name, fn in (order if r % 2 == 0 else order[::-1]):
            _sync(device)
            t0 = clock()
            fn()
            _sync(device)
            times[name].append((clock() - t0) * 1e3)
    return {name: statistics.median(ts) for name, ts in times.items()}


def module_steps(m, x: torch.Tensor, grad: torch.Tensor, autocast: torch.dtype | None = None):
    """(forward without grad, training step) of a module called as ``m(x)[0]`` (torch.nn.LSTM's
    convention); the step sets the parameters' grads to None first, as ``optimizer.zero_grad()``
    does, and back-propagates ``grad``; both under ``torch.autocast`` to ``autocast`` if given."""
    def ctx():
        return torch.autocast(x.device.type, autocast) if autocast else contextlib.nullcontext()

    def forward():
        with torch.no_grad(), ctx():
            m(x)

    def train_step():
        for p in m.parameters():
            p.grad = None
        with ctx():
            out = m(x)[0]
        out.backward(grad.to(out.dtype))
    return forward, train_step


def ratios(ms: dict[Hashable, float], anchor: Hashable) -> dict[Hashable, float]:
    """Each median over the anchor's (the anchor itself: 1.0)."""
    return {name: t / ms[anchor] for name, t in ms.items()}


# The CPU flags (``/proc/cpuinfo``) that decide how fast a float32 / bfloat16 / float16 GEMM can
# run: vector width (AVX2, AVX-512), dot-product and matrix units (AVX512-BF16 / -FP16, AMX).
CPU_FEATURES = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16",
                "amx_tile", "amx_bf16", "amx_fp16", "amx_int8", "asimd", "sve", "sve2")


def cpu_features() -> str:
    """The CPU's model name and its vector / matrix features among ``CPU_FEATURES`` (Linux
    ``/proc/cpuinfo``; elsewhere the platform's processor string), and the instruction set torch
    dispatches its own kernels to."""
    import platform
    model, flags = "", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip().lower() == "model name" and not model:
                    model = value.strip()
                elif key.strip() in ("flags", "Features") and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    model = model or platform.processor() or platform.machine()
    found = [f for f in CPU_FEATURES if f in flags]
    try:
        torch_isa = torch.backends.cpu.get_cpu_capability()
    except AttributeError:  # torch < 2.1
        torch_isa = "unknown"
    return (f"{model}; features: {' '.join(found) or 'none of ' + '/'.join(CPU_FEATURES[:3])}; "
            f"torch's CPU kernels: {torch_isa}")


def gemm_gflops(n: int = 2048, *, repeat: int = 5, dtype: torch.dtype = torch.float32,
                product=torch.mm) -> float:
    """The rate of one large (n, n) x (n, n) ``product`` (default ``torch.mm``: the machine's
    practical GEMM limit on torch's threads) in GFLOP/s, median of ``repeat`` after one warm-up,
    without autograd."""
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    with torch.no_grad():
        ms = compare({"mm": lambda: product(a, b)}, warmup=1, repeat=repeat)["mm"]
    return 2 * n ** 3 / (ms * 1e6)


def machine() -> str:
    """torch's version, its thread count and the load average (what the numbers depend on)."""
    load = ", load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()) \
        if hasattr(os, "getloadavg") else ""
    return f"torch {torch.__version__}, {torch.get_num_threads()} threads{load}"

"""Timing harness shared by ``layernorm bench`` and ``benchmarks/``: medians over interleaved
repeats after warm-up, ratios against an anchor measured in the same run. Never used by tests to
assert a speed."""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import torch

from ._io import format_table  # noqa: F401  (its home is the I/O helpers; kept importable here)


def _sync(device: torch.device | str | None) -> None:
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def compare(fns: dict[str, Callable[[], object]], *, warmup: int = 3, repeat: int = 15,
            device: torch.device | str | None = None,
            clock: Callable[[], float] = time.perf_counter) -> dict[str, float]:
    """Median milliseconds of each function. Rounds interleave the candidates, in alternating order,
    so that drift in the machine's speed (other load, frequency) and the order hit all alike.
    ``clock``: wall time by default; ``time.process_time`` counts only this process's CPU time
    (stable on a machine shared with other jobs when torch uses one thread)."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    order = list(fns.items())
    for r in range(repeat):
        for name, fn in (order if r % 2 == 0 else order[::-1]):
            _sync(device)
            t0 = clock()
            fn()
            _sync(device)
            times[name].append((clock() - t0) * 1e3)
    return {name: statistics.median(ts) for name, ts in times.items()}


# format_table: in layernorm._io (imported above), with the other helpers that write output.


NORM_SHAPES = ((4096, 1024), (8192, 4096), (65536, 128))  # LayerNorm rows
STAT_SHAPES = ((8192, 1024), (65536, 128))  # BatchNorm and RMSNorm rows
NORM_KINDS = ("layer", "batch", "rms")


def _fwd_bwd_rows(norm: str, shape: tuple[int, ...], mods: dict, anchor: str, *, repeat: int,
                  device: str, dtype: torch.dtype, also: str | None = None) -> list[dict]:
    """Training forward+backward of each module on one tensor, interleaved; ratios to ``anchor``
    (and to ``also``, in a second column)."""
    x = torch.randn(shape, device=device, dtype=dtype, requires_grad=True)
    g = torch.randn(shape, device=device, dtype=dtype)

    def step(m):
        def run():
            x.grad = None
            m(x).backward(g)
        return run
    ms = compare({k: step(m.train()) for k, m in mods.items()}, repeat=repeat, device=device)
    return [{"norm": norm, "shape": "x".join(map(str, shape)), "impl": name, "fwd+bwd ms": t,
             "ratio": t / ms[anchor], **({f"vs {also}": t / ms[also]} if also else {})}
            for name, t in ms.items()]


def bench_norms(shapes=NORM_SHAPES, *, repeat: int = 15, device: str = "cpu",
                dtype: torch.dtype = torch.float32, norms=("layer",),
                stat_shapes=STAT_SHAPES) -> list[dict]:
    """Forward+backward (training mode) of this package's norms vs torch's, per shape:

    layer  ``layernorm.LayerNorm`` vs ``torch.nn.LayerNorm`` on ``shapes``
    batch  ``layernorm.BatchNorm`` (and ``unbiased=True``) vs ``torch.nn.BatchNorm1d``
    rms    ``layernorm.RMSNorm`` vs ``torch.nn.RMSNorm``, and both vs ``torch.nn.LayerNorm`` on the
           same tensor (column "vs torch.nn.LayerNorm")

    batch and rms use ``stat_shapes``. Ratios are to torch's module, measured in the same run."""
    from .norms import BatchNorm, LayerNorm, RMSNorm
    kw = {"device": device, "dtype": dtype}
    rows = []
    for norm in norms:
        for shape in (shapes if norm == "layer" else stat_shapes):
            H = shape[-1]
            if norm == "layer":
                mods = {"torch.nn.LayerNorm": torch.nn.LayerNorm(H, **kw),
                        "layernorm.LayerNorm": LayerNorm(H, **kw)}
                rows += _fwd_bwd_rows("LayerNorm", shape, mods, "torch.nn.LayerNorm",
                                      repeat=repeat, device=device, dtype=dtype)
            elif norm == "batch":
                C = shape[1]
                mods = {"torch.nn.BatchNorm1d": torch.nn.BatchNorm1d(C, **kw),
                        "layernorm.BatchNorm": BatchNorm(C, **kw),
                        "layernorm.BatchNorm(unbiased=True)": BatchNorm(C, unbiased=True, **kw)}
                rows += _fwd_bwd_rows("BatchNorm", shape, mods, "torch.nn.BatchNorm1d",
                                      repeat=repeat, device=device, dtype=dtype)
            else:
                mods = {"torch.nn.RMSNorm": torch.nn.RMSNorm(H, **kw),
                        "layernorm.RMSNorm": RMSNorm(H, **kw),
                        "torch.nn.LayerNorm": torch.nn.LayerNorm(H, **kw)}
                rows += _fwd_bwd_rows("RMSNorm", shape, mods, "torch.nn.RMSNorm", repeat=repeat,
                                      device=device, dtype=dtype, also="torch.nn.LayerNorm")
    return rows


def _run_norms(args: argparse.Namespace) -> int:
    import os

    from ._io import atomic_write_json
    shapes = tuple(tuple(int(d) for d in s.split("x")) for s in args.shapes) if args.shapes \
        else None
    rows = bench_norms(shapes or NORM_SHAPES, repeat=args.repeat, device=args.device,
                       norms=args.norms, stat_shapes=shapes or STAT_SHAPES)
    load = ", load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()) \
        if hasattr(os, "getloadavg") else ""
    print(f"Norms, training forward+backward, fp32, {args.device}, median of {args.repeat} "
          f"interleaved rounds (torch {torch.__version__}, {torch.get_num_threads()} threads"
          f"{load}); ratio: to the torch module of the same norm")
    columns = ["norm", "shape", "impl", "fwd+bwd ms", "ratio"]
    if any("vs torch.nn.LayerNorm" in r for r in rows):
        columns.append("vs torch.nn.LayerNorm")
    print(format_table(rows, columns))
    if args.json:
        atomic_write_json(args.json, rows)
    return 0


def add_commands(sub) -> None:
    p = sub.add_parser("bench", help="speed benchmarks (ratios against torch in the same run)")
    bsub = p.add_subparsers(dest="bench", required=True)
    n = bsub.add_parser("norms", help="LayerNorm, BatchNorm, RMSNorm forward+backward vs torch's")
    n.add_argument("--shapes", nargs="+", metavar="NxH", help="shapes, e.g. 4096x1024 (default: "
                   "4096x1024 8192x4096 65536x128 for LayerNorm, 8192x1024 65536x128 for the "
                   "others)")
    n.add_argument("--norms", nargs="+", choices=NORM_KINDS, default=list(NORM_KINDS),
                   help="which norms to time (default: all)")
    n.add_argument("--repeat", type=int, default=15)
    n.add_argument("--device", default="cpu")
    n.add_argument("--json", help="also write the rows to this JSON file")
    n.set_defaults(func=_run_norms)
    from .rnn.bench import add_command as add_rnn_command  # `layernorm bench rnn`
    add_rnn_command(bsub)

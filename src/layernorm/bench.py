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


NORM_SHAPES = ((4096, 1024), (8192, 4096), (65536, 128))


def bench_norms(shapes=NORM_SHAPES, *, repeat: int = 15, device: str = "cpu",
                dtype: torch.dtype = torch.float32) -> list[dict]:
    """Forward+backward of ``layernorm.LayerNorm`` vs ``torch.nn.LayerNorm`` per shape."""
    from .norms import LayerNorm
    rows = []
    for shape in shapes:
        H = shape[-1]
        x = torch.randn(shape, device=device, dtype=dtype, requires_grad=True)
        g = torch.randn(shape, device=device, dtype=dtype)
        mods = {"torch.nn.LayerNorm": torch.nn.LayerNorm(H, device=device, dtype=dtype),
                "layernorm.LayerNorm": LayerNorm(H, device=device, dtype=dtype)}

        def step(m):
            return lambda: m(x).backward(g)
        ms = compare({k: step(m) for k, m in mods.items()}, repeat=repeat, device=device)
        anchor = ms["torch.nn.LayerNorm"]
        for name, t in ms.items():
            rows.append({"shape": "x".join(map(str, shape)), "impl": name, "fwd+bwd ms": t,
                         "ratio": t / anchor})
    return rows


def _run_norms(args: argparse.Namespace) -> int:
    from ._io import atomic_write_json
    shapes = tuple(tuple(int(d) for d in s.split("x")) for s in args.shapes) if args.shapes \
        else NORM_SHAPES
    rows = bench_norms(shapes, repeat=args.repeat, device=args.device)
    print(f"LayerNorm forward+backward, fp32, {args.device}, median of {args.repeat} "
          f"(torch {torch.__version__}, {torch.get_num_threads()} threads)")
    print(format_table(rows, ["shape", "impl", "fwd+bwd ms", "ratio"]))
    if args.json:
        atomic_write_json(args.json, rows)
    return 0


def add_commands(sub) -> None:
    p = sub.add_parser("bench", help="speed benchmarks (ratios against torch in the same run)")
    bsub = p.add_subparsers(dest="bench", required=True)
    n = bsub.add_parser("norms", help="LayerNorm forward+backward vs torch.nn.LayerNorm")
    n.add_argument("--shapes", nargs="+", metavar="NxH", help="shapes, e.g. 4096x1024 "
                   "(default: 4096x1024 8192x4096 65536x128)")
    n.add_argument("--repeat", type=int, default=15)
    n.add_argument("--device", default="cpu")
    n.add_argument("--json", help="also write the rows to this JSON file")
    n.set_defaults(func=_run_norms)
    from .rnn.bench import add_command as add_rnn_command  # `layernorm bench rnn`
    add_rnn_command(bsub)

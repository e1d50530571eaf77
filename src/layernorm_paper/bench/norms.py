"""``layernorm bench norms``: LayerNorm, BatchNorm and RMSNorm training forward+backward against
torch's modules of the same norm, one tensor per shape, candidates interleaved (``harness``)."""
from __future__ import annotations

import argparse

import torch

from .._io import atomic_write_json, format_table
from .harness import compare, machine

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
    from layernorm.norms import BatchNorm, LayerNorm, RMSNorm
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


def _parse_shape(s: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(v) for v in s.lower().split("x"))
    except ValueError:
        shape = ()
    if len(shape) < 2 or min(shape) < 1:
        raise argparse.ArgumentTypeError(f"expected a shape NxH of sizes >= 1 such as 4096x1024, "
                                         f"received {s!r}")
    return shape


def _run(args: argparse.Namespace) -> int:
    shapes = tuple(args.shapes) if args.shapes else None
    rows = bench_norms(shapes or NORM_SHAPES, repeat=args.repeat, device=args.device,
                       norms=args.norms, stat_shapes=shapes or STAT_SHAPES)
    print(f"Norms, training forward+backward, fp32, {args.device}, median of {args.repeat} "
          f"interleaved rounds ({machine()}); ratio: to the torch module of the same norm")
    columns = ["norm", "shape", "impl", "fwd+bwd ms", "ratio"]
    if any("vs torch.nn.LayerNorm" in r for r in rows):
        columns.append("vs torch.nn.LayerNorm")
    print(format_table(rows, columns))
    if args.json:
        atomic_write_json(args.json, rows)
    return 0


def add_command(bench_subparsers) -> None:
    """Register ``norms`` under ``layernorm bench``."""
    n = bench_subparsers.add_parser(
        "norms", help="LayerNorm, BatchNorm, RMSNorm forward+backward vs torch's")
    n.add_argument("--shapes", nargs="+", type=_parse_shape, metavar="NxH",
                   help="shapes, e.g. 4096x1024 (default: 4096x1024 8192x4096 65536x128 for "
                        "LayerNorm, 8192x1024 65536x128 for the others)")
    n.add_argument("--norms", nargs="+", choices=NORM_KINDS, default=list(NORM_KINDS),
                   help="which norms to time (default: all)")
    n.add_argument("--repeat", type=int, default=15)
    n.add_argument("--device", default="cpu")
    n.add_argument("--json", help="also write the rows to this JSON file")
    n.set_defaults(func=_run)

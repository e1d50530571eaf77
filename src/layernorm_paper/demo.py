"""``layernorm demo``: the paper's point in one screen. One example normalized alone (batch 1) and
inside batches of 4 and 128: layer norm gives the same output every time, batch norm does not, and
batch norm cannot train on one example at all."""
from __future__ import annotations

import argparse

import torch

from . import _args
from ._io import format_table
from layernorm.norms import make_norm


@torch.no_grad()
def demo(features: int = 256, seed: int = 0) -> list[dict]:
    gen = torch.Generator().manual_seed(seed)
    x0 = torch.randn(1, features, generator=gen)
    rows = []
    for name in ("layer", "batch", "rms"):
        norm = make_norm(name, features)
        for batch in (1, 4, 128):
            others = torch.randn(batch - 1, features, generator=gen) * 3 + 1
            try:
                y0 = norm(torch.cat([x0, others]))[0]
            except ValueError as err:
                rows.append({"norm": name, "batch": batch, "out[:3]": "ValueError (below)",
                             "error": str(err)})
                continue
            ref = make_norm(name, features)(torch.cat([x0, torch.randn(127, features, generator=gen)]))[0]
            rows.append({"norm": name, "batch": batch, "out[:3]": _fmt(y0[:3]),
                         "mean": float(y0.mean()), "std": float(y0.std(unbiased=False)),
                         "max |out - out in another batch of 128|": float((y0 - ref).abs().max())})
    return rows


def _fmt(t: torch.Tensor) -> str:
    return "[" + ", ".join(f"{v:+.3f}" for v in t.tolist()) + "]"


def _run(args: argparse.Namespace) -> int:
    rows = demo(args.features, args.seed)
    print(f"One example x0 ({args.features} features), normalized inside batches of other examples:")
    print(format_table(rows, ["norm", "batch", "out[:3]", "mean", "std",
                              "max |out - out in another batch of 128|"]))
    for r in rows:
        if "error" in r:
            print(f"\n{r['norm']} norm at batch {r['batch']}: {r['error']}")
    print("\nLayer norm and RMS norm: x0's output never changes (difference 0). Batch norm: it depends "
          "on the batch, and at batch size 1 there are no batch statistics.")
    return 0


def add_commands(sub) -> None:
    p = sub.add_parser("demo", help="LN vs BN on one example at batch sizes 1, 4, 128")
    p.add_argument("--features", type=_args.positive_int, default=256)
    p.add_argument("--seed", type=_args.seed, default=0)
    p.set_defaults(func=_run)

"""``layernorm bench growth``: how the gradient of a recurrent weight grows with the sequence
length (docs/rnn.md, "Long sequences").

For each model and length T one sequence of T steps runs forward, the loss is the sum of the last
step's output, and the table shows |dL/dW_hh|, the Frobenius norm of the gradient of the first
layer's recurrent weight (``weight_hh_l0``). Every model starts from torch's initialization (the
same seed), the input is the same N(0, 1) sequence cut to T steps, and everything runs in float64
by default so that a gradient of 1e30 is a number, not an overflow. ``gradient_growth``
(``layernorm_paper.analysis.growth``) returns the rows; the reproduction reuses it for the
paper's section 3.1 claim.

Models (``GROWTH_MODELS``): the LN-LSTM at torch's initialization (gains 1), with the recurrent
term's gain at 0.5 (``recurrent_gain=0.5``) and with the cell norm's gain at 0.5, torch.nn.LSTM,
the LN-GRU and the LN-RNN.
"""
from __future__ import annotations

import argparse

import torch

from .._io import atomic_write_json, format_table
from ..analysis.growth import DTYPES, GROWTH_MODELS, LENGTHS, gradient_growth
from .harness import machine
from .rnn import _positive


def _lengths(s: str) -> list[int]:
    try:
        values = [int(v) for v in s.split(",")]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated lengths >= 1 such as "
                                         f"50,200,500, received {s!r}")
    return values


def _run(args: argparse.Namespace) -> int:
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = gradient_growth(args.lengths, args.models or GROWTH_MODELS, hidden=args.hidden,
                           batch=args.batch, input_size=args.input_size,
                           dtype=DTYPES[args.dtype], seed=args.seed, progress=True)
    print(f"|dL/dW_hh| for a loss on the last output (sum of h_T), one layer, hidden "
          f"{args.hidden}, batch {args.batch}, input {args.input_size}, {args.dtype}, torch's "
          f"initialization (seed {args.seed}); nan: not finite in {args.dtype}. ({machine()})")
    table = [{"model": r["model"], **{f"T={T}": f"{v:.3g}" for T, v in r["T"].items()}}
             for r in rows]
    print(format_table(table, ["model"] + [f"T={T}" for T in args.lengths]))
    if args.json:
        atomic_write_json(args.json, [{"model": r["model"],
                                       "T": {str(T): v for T, v in r["T"].items()}}
                                      for r in rows])
        print(f"wrote {args.json}")
    return 0


def add_command(bench_subparsers) -> None:
    """Register ``growth`` under ``layernorm bench``."""
    p = bench_subparsers.add_parser(
        "growth", help="|dL/dW_hh| against the sequence length: LN-LSTM (gains 1, recurrent "
                       "gain 0.5, cell-norm gain 0.5), torch.nn.LSTM, LN-GRU, LN-RNN")
    p.add_argument("--lengths", type=_lengths, default=list(LENGTHS), metavar="T,T,...",
                   help="sequence lengths (default 50,200,500,1000,2000)")
    p.add_argument("--models", nargs="+", choices=GROWTH_MODELS, metavar="MODEL",
                   help=f"models to run (default all: {', '.join(GROWTH_MODELS)})")
    p.add_argument("--hidden", type=_positive, default=128)
    p.add_argument("--batch", type=_positive, default=4)
    p.add_argument("--input-size", type=_positive, default=32)
    p.add_argument("--dtype", choices=sorted(DTYPES), default="float64")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's)")
    p.add_argument("--json", help="also write the rows to this JSON file")
    p.set_defaults(func=_run)

"""``layernorm bench growth``: how the gradient of a recurrent weight grows with the sequence
length (docs/rnn.md, "Long sequences").

For each model and length T one sequence of T steps runs forward, the loss is the sum of the last
step's output, and the table shows |dL/dW_hh|, the Frobenius norm of the gradient of the first
layer's recurrent weight (``weight_hh_l0``). Every model starts from torch's initialization (the
same seed), the input is the same N(0, 1) sequence cut to T steps, and everything runs in float64
by default so that a gradient of 1e30 is a number, not an overflow. ``gradient_growth`` returns
the rows, for other code (the paper's section 3.1 stability claim) to reuse.

Models (``GROWTH_MODELS``): the LN-LSTM at torch's initialization (gains 1), with the recurrent
term's gain at 0.5 (``recurrent_gain=0.5``) and with the cell norm's gain at 0.5, torch.nn.LSTM,
the LN-GRU and the LN-RNN.
"""
from __future__ import annotations

import argparse
import math
from typing import Callable

import torch
from torch import nn

from .._io import atomic_write_json, format_table
from .harness import machine
from .rnn import _positive

LENGTHS = (50, 200, 500, 1000, 2000)
DTYPES = {"float64": torch.float64, "float32": torch.float32}


def _ln(cls: str, gain_c: float | None = None, **options) -> Callable[..., nn.Module]:
    """A builder of layernorm's ``cls`` with norm="layer", ``options``, and gain_c set after
    the initialization (the cell norm's gain has no constructor option)."""
    def build(I: int, H: int) -> nn.Module:
        import layernorm
        m = getattr(layernorm, cls)(I, H, norm="layer", **options)
        if gain_c is not None:
            with torch.no_grad():
                m.gain_c_l0.fill_(gain_c)
        return m
    return build


# name: builder(input_size, hidden_size) -> a one-layer module from torch's initialization
_BUILDERS: dict[str, Callable[..., nn.Module]] = {
    "LN-LSTM (gains 1)": _ln("LSTM"),
    "LN-LSTM recurrent_gain=0.5": _ln("LSTM", recurrent_gain=0.5),
    "LN-LSTM cell-norm gain 0.5": _ln("LSTM", gain_c=0.5),
    "torch.nn.LSTM": nn.LSTM,
    "LN-GRU": _ln("GRU"),
    "LN-RNN": _ln("RNN"),
}
GROWTH_MODELS = tuple(_BUILDERS)


def hh_gradient_norm(module: nn.Module, x: torch.Tensor) -> float:
    """|dL/dW_hh| of ``module`` (one recurrent layer with ``weight_hh_l0``, torch's call
    convention) on the input ``x``, the loss the sum of the last step's output; ``math.nan``
    where that norm is not finite in ``x``'s dtype. ``x`` is (T, B, I), or (B, T, I) for a
    ``batch_first`` module."""
    out = module(x)[0]
    last = out[:, -1] if getattr(module, "batch_first", False) else out[-1]
    (grad,) = torch.autograd.grad(last.sum(), [module.weight_hh_l0])
    norm = grad.norm().item()
    return norm if math.isfinite(norm) else math.nan


def gradient_growth(lengths=LENGTHS, models=GROWTH_MODELS, *, hidden: int = 128, batch: int = 4,
                    input_size: int = 32, dtype: torch.dtype = torch.float64, seed: int = 0,
                    progress: bool = False) -> list[dict]:
    """One row per model: {"model", "T": {T: |dL/dW_hh|}} (``math.nan`` where the gradient is not
    finite in ``dtype``). The loss is ``output[-1].sum()`` of a (T, batch, input_size) N(0, 1)
    input through one layer of ``hidden`` units from torch's initialization (``seed``)."""
    unknown = [m for m in models if m not in _BUILDERS]
    if unknown:
        raise ValueError(f"gradient_growth expected models among {list(GROWTH_MODELS)}, received "
                         f"{unknown}. Pass some of those names.")
    if not lengths or min(lengths) < 1:
        raise ValueError(f"gradient_growth expected sequence lengths >= 1, received "
                         f"{list(lengths)}. Pass e.g. lengths=(50, 200).")
    from tqdm import tqdm
    x_all = torch.randn(max(lengths), batch, input_size,
                        generator=torch.Generator().manual_seed(seed), dtype=dtype)
    rows = []
    jobs = [(name, T) for name in models for T in lengths]
    found: dict[str, dict[int, float]] = {name: {} for name in models}
    for name, T in tqdm(jobs, desc="bench growth", disable=not progress):
        torch.manual_seed(seed)
        m = _BUILDERS[name](input_size, hidden).to(dtype)
        found[name][T] = hh_gradient_norm(m, x_all[:T])
    for name in models:
        rows.append({"model": name, "T": found[name]})
    return rows


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

"""``layernorm soak``: train the library's recurrent models for a while with the batch shapes
changing every step, as a check to run before trusting it with a long job (docs/rnn.md).

Each step picks one of the models below in turn, a new sequence length and batch size, padded or
packed with unsorted lengths, and takes one Adam step on a regression loss (``_loss``). Every
``check_every`` steps of a model the same batch also runs through the reference: the model copied to float64 on
the readable loop (``use_fused = False``, ``layernorm.recurrence``), or, for the model with its
recurrent regularizers on, its own readable loop in float32 with the same random masks. The
difference of the outputs and of every parameter gradient, relative to each tensor's scale, must
stay within ``TOLERANCE``, or within ``FLOOR_FACTOR`` times the difference of the readable loop run
in float32 on the same batch (the model's own sensitivity to rounding: at torch's initialization
the LN-LSTM amplifies it along the sequence, docs/rnn.md "Long sequences", so over ~100 steps
any float32 computation of it is a few % from float64); a loss or gradient that is not finite, or
any exception, is a failure.
The report: steps and checks per model, the largest difference seen, the peak resident memory
and the peak bytes of the kernels' buffer pool. Exit status 1 on any failure.

Models (``MODELS``): a 2-layer LN-LSTM; an LN-LSTM encoder feeding an LN-LSTM decoder (both
graphs in one backward); a bidirectional LN-GRU; a BN-LSTM; an LN-LSTM with recurrent dropout,
zoneout and DropConnect; an LN-RNN. The LN-LSTMs start with ``recurrent_gain=0.5``: at gains 1
the LN-LSTM amplifies any change along the sequence (docs/rnn.md, "Long sequences"); measured on
a batch of 94 steps after 130 updates, changing its float64 weights by float32's rounding moved
its float64 gradients by 0.1% to 9% of their scale, so no float32 computation of it can be held
to a float64 reference there, and a check would measure the model, not the library.
"""
from __future__ import annotations

import argparse
import copy
import math
import resource
import sys
import time

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from . import _args
from ._io import format_table

# outputs and gradients of float32 models against float64 references, relative to each tensor's
# scale: bounded models are ~1e-5 from float64; batch norm over few examples reaches ~1e-3 on
# some batches, as far as the readable loop in float32 (the floor)
TOLERANCE = 1e-2
FLOOR_FACTOR = 10
MODELS = ("LN-LSTM 2 layers", "LN-LSTM encoder-decoder", "LN-GRU bidirectional", "BN-LSTM",
          "LN-LSTM regularized", "LN-RNN")


class _EncoderDecoder(nn.Module):
    """An encoder LN-LSTM whose final state starts a decoder LN-LSTM over the second half."""

    def __init__(self, I: int, H: int):
        super().__init__()
        import layernorm
        self.encoder = layernorm.LSTM(I, H, num_layers=2, norm="layer", recurrent_gain=0.5)
        self.decoder = layernorm.LSTM(I, H, num_layers=2, norm="layer", recurrent_gain=0.5)

    @property
    def use_fused(self) -> bool:
        return self.encoder.use_fused

    @use_fused.setter
    def use_fused(self, value: bool) -> None:
        self.encoder.use_fused = self.decoder.use_fused = value

    def forward(self, x):
        if isinstance(x, torch.nn.utils.rnn.PackedSequence):
            x = pad_packed_sequence(x)[0]
        half = max(1, x.shape[0] // 2)
        _, state = self.encoder(x[:half])
        return self.decoder(x[half:] if x.shape[0] > 1 else x, state)


def _build(name: str, I: int, H: int) -> nn.Module:
    import layernorm
    if name == "LN-LSTM 2 layers":
        return layernorm.LSTM(I, H, num_layers=2, norm="layer", recurrent_gain=0.5)
    if name == "LN-LSTM encoder-decoder":
        return _EncoderDecoder(I, H)
    if name == "LN-GRU bidirectional":
        return layernorm.GRU(I, H, num_layers=2, bidirectional=True, norm="layer")
    if name == "BN-LSTM":
        return layernorm.LSTM(I, H, norm="batch", max_length=400)
    if name == "LN-LSTM regularized":
        return layernorm.LSTM(I, H, num_layers=2, norm="layer", recurrent_gain=0.5,
                              recurrent_dropout=0.2, zoneout=0.1, dropconnect=0.2)
    if name == "LN-RNN":
        return layernorm.RNN(I, H, norm="layer")
    raise ValueError(f"soak expected a model among {list(MODELS)}, received {name!r}.")


def _reference(name: str, m: nn.Module) -> tuple[nn.Module, torch.dtype]:
    """The model's reference and its dtype: float64 on the readable loop, or, with random masks
    (the regularized model), the readable loop in float32 (same masks from the same seed)."""
    ref = copy.deepcopy(m)
    ref.use_fused = False
    if name == "LN-LSTM regularized":
        return ref, torch.float32
    return ref.double(), torch.float64


def _batch(gen: torch.Generator, I: int, max_len: int, max_batch: int, min_batch: int):
    """x (T, B, I) and lengths (None: padded, all T; else a tensor, unsorted, max T)."""
    T = int(torch.randint(1, max_len + 1, (1,), generator=gen))
    B = int(torch.randint(min_batch, max_batch + 1, (1,), generator=gen))
    x = torch.randn(T, B, I, generator=gen)
    lengths = None
    if torch.rand(1, generator=gen).item() < 0.5:
        lengths = torch.randint(1, T + 1, (B,), generator=gen)
        lengths[torch.randperm(B, generator=gen)[:max(1, min_batch)]] = T
    return x, lengths


def _forward(m: nn.Module, x: torch.Tensor, lengths) -> list[torch.Tensor]:
    """Outputs (padded) and final states."""
    inp = x if lengths is None else pack_padded_sequence(x, lengths, enforce_sorted=False)
    out, state = m(inp)
    if lengths is not None and not isinstance(m, _EncoderDecoder):
        out = pad_packed_sequence(out, total_length=x.shape[0])[0]
    states = state if isinstance(state, tuple) else (state,)
    return [out, *states]


def _loss(outs: list[torch.Tensor]) -> torch.Tensor:
    """A regression of everything returned (outputs and final states) onto a fixed pattern in
    [-0.5, 0.5]: every output reaches the gradient, and training keeps the states unsaturated."""
    return sum(((o - torch.linspace(-0.5, 0.5, o.numel(), dtype=o.dtype).view_as(o)) ** 2).mean()
               for o in outs)


def _difference(got: list[torch.Tensor], want: list[torch.Tensor]) -> float:
    """The largest |got - want| over each tensor's scale (max(1, max |want|)); infinite where
    either side is not finite (a NaN would otherwise compare as no difference)."""
    worst = 0.0
    for a, b in zip(got, want):
        if not (torch.isfinite(a).all() and torch.isfinite(b).all()):
            return math.inf
        scale = max(1.0, b.abs().max().item())
        worst = max(worst, (a.double() - b.double()).abs().max().item() / scale)
    return worst


def _float32_loop(m: nn.Module, x: torch.Tensor, lengths) -> list[torch.Tensor]:
    """Outputs and parameter gradients of m's readable loop in float32 (the floor)."""
    loop = copy.deepcopy(m)
    loop.use_fused = False
    outs = _forward(loop, x, lengths)
    grads = torch.autograd.grad(_loss(outs), list(loop.parameters()))
    return [o.detach() for o in outs] + list(grads)


def _pool_bytes() -> int:
    from layernorm.ops import common
    return sum(b.numel() * b.element_size() for b in common._WORKSPACE._bufs)


def soak(seconds: float, *, hidden: int = 128, input_size: int = 32, max_len: int = 120,
         max_batch: int = 32, check_every: int = 5, seed: int = 0, models=MODELS,
         progress: bool = True, reference=None) -> dict:
    """Train ``models`` in turn for ``seconds`` (at least one step each) -> {"rows": one per
    model, "failures": [messages], "steps", "peak_rss_mb", "peak_pool_mb", "seconds"}.
    ``reference(name, model) -> (module, dtype)``: what a check compares with (default
    ``_reference``)."""
    reference = _reference if reference is None else reference
    from tqdm import tqdm
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    built = {name: _build(name, input_size, hidden) for name in models}
    opts = {name: torch.optim.Adam(m.parameters(), lr=1e-3) for name, m in built.items()}
    stats = {name: {"model": name, "steps": 0, "checks": 0, "max diff": 0.0,
                    "float32 floor": 0.0, "last loss": math.nan} for name in models}
    failures: list[str] = []
    peak_pool = 0
    start = time.monotonic()
    bar = tqdm(total=round(seconds), desc="soak", unit="s", disable=not progress)
    step = 0
    while step < len(models) or time.monotonic() - start < seconds:
        name = models[step % len(models)]
        m, row = built[name], stats[name]
        # batch norm over 2 or 3 examples is ill-conditioned: keep 4 running in its batches
        x, lengths = _batch(gen, input_size, max_len, max_batch,
                            4 if name == "BN-LSTM" else 1)
        target_seed = int(torch.randint(0, 2 ** 31, (1,), generator=gen))
        try:
            check = row["steps"] % check_every == 0
            params = list(m.parameters())
            torch.manual_seed(target_seed)  # the regularizers' masks, repeated by the reference
            outs = _forward(m, x, lengths)
            loss = _loss(outs)
            grads = torch.autograd.grad(loss, params)
            if not torch.isfinite(loss) or not all(torch.isfinite(g).all() for g in grads):
                raise FloatingPointError(f"loss {loss.item():.4g} or a gradient not finite")
            if check:
                ref, dtype = reference(name, m)
                torch.manual_seed(target_seed)
                ref_outs = _forward(ref, x.to(dtype), lengths)
                ref_grads = torch.autograd.grad(_loss(ref_outs), list(ref.parameters()))
                want = [o.detach() for o in ref_outs] + list(ref_grads)
                diff = _difference([o.detach() for o in outs] + list(grads), want)
                floor = 0.0
                if dtype == torch.float64 and diff > TOLERANCE:
                    floor = _difference(_float32_loop(m, x, lengths), want)
                row["checks"] += 1
                row["max diff"] = max(row["max diff"], diff)
                row["float32 floor"] = max(row["float32 floor"], floor)
                if not (math.isfinite(diff) and diff <= max(TOLERANCE, FLOOR_FACTOR * floor)):
                    raise AssertionError(
                        f"differs from its reference by {diff:.3g} of the tensors' scale "
                        f"(tolerance {TOLERANCE}, or {FLOOR_FACTOR} x the readable loop's "
                        f"{floor:.3g} in float32)")
            for p, g in zip(params, grads):
                p.grad = g
            opts[name].step()
            row["steps"] += 1
            row["last loss"] = loss.item()
        except Exception as err:  # noqa: BLE001 - every failure is reported, the run goes on
            shape = f"T={x.shape[0]}, B={x.shape[1]}, " + \
                ("padded" if lengths is None else f"lengths {lengths.tolist()}")
            failures.append(f"{name}, step {row['steps']} ({shape}): "
                            f"{type(err).__name__}: {err}")
            row["steps"] += 1
        peak_pool = max(peak_pool, _pool_bytes())
        step += 1
        bar.n = min(round(seconds), round(time.monotonic() - start))
        bar.set_postfix(steps=step, failures=len(failures), refresh=False)
        bar.refresh()
    bar.close()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    rss_mb = rss / 2 ** 20 if sys.platform == "darwin" else rss / 2 ** 10
    return {"rows": list(stats.values()), "failures": failures, "steps": step,
            "peak_rss_mb": rss_mb, "peak_pool_mb": peak_pool / 2 ** 20,
            "seconds": time.monotonic() - start}


def _run(args: argparse.Namespace) -> int:
    if args.threads:
        torch.set_num_threads(args.threads)
    seconds = args.seconds if args.seconds is not None else 60 * args.minutes
    result = soak(seconds, hidden=args.hidden, input_size=args.input_size,
                  max_len=args.max_len, max_batch=args.max_batch,
                  check_every=args.check_every, seed=args.seed)
    rows = [{**r, "max diff": f"{r['max diff']:.2g}", "last loss": f"{r['last loss']:.4g}",
             "float32 floor": f"{r['float32 floor']:.2g}" if r["float32 floor"] else "-"}
            for r in result["rows"]]
    print(f"soak: {result['steps']} training steps in {result['seconds']:.0f} s, lengths "
          f"1..{args.max_len}, batches 1..{args.max_batch} (padded or packed, unsorted), hidden "
          f"{args.hidden}; every {args.check_every}th step of a model against its reference "
          f"(max diff: relative to each tensor's scale, tolerance {TOLERANCE} or {FLOOR_FACTOR} "
          f"x the float32 floor, the readable loop's own difference where max diff passed "
          f"{TOLERANCE}); torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(format_table(rows, ["model", "steps", "checks", "max diff", "float32 floor",
                              "last loss"]))
    print(f"peak resident memory {result['peak_rss_mb']:.0f} MiB; peak buffer pool "
          f"{result['peak_pool_mb']:.1f} MiB")
    for failure in result["failures"]:
        print(f"FAILED {failure}")
    if result["failures"]:
        print(f"soak: {len(result['failures'])} failures", file=sys.stderr)
        return 1
    print("soak: no failures")
    return 0


def add_commands(sub) -> None:
    p = sub.add_parser("soak", help="train the recurrent models with changing shapes for a "
                                    "while, checked against the reference; exit 1 on failure")
    when = p.add_mutually_exclusive_group()
    when.add_argument("--minutes", type=_args.positive_float, default=5.0,
                      help="how long to train (default 5)")
    when.add_argument("--seconds", type=_args.positive_float, default=None,
                      help="how long to train, in seconds (instead of --minutes)")
    p.add_argument("--hidden", type=_args.positive_int, default=128)
    p.add_argument("--input-size", type=_args.positive_int, default=32)
    p.add_argument("--max-len", type=_args.positive_int, default=120,
                   help="longest sequence of a batch (default 120)")
    p.add_argument("--max-batch", type=_args.int_at_least(4), default=32)
    p.add_argument("--check-every", type=_args.positive_int, default=5,
                   help="compare every Nth step of a model with its reference (default 5)")
    p.add_argument("--seed", type=_args.seed, default=0)
    p.add_argument("--threads", type=_args.positive_int, default=None,
                   help="torch threads (default: torch's)")
    p.set_defaults(func=_run)

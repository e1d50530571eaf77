"""``layernorm bench rnn``: LN-LSTM / LN-GRU speed and memory against torch.nn.LSTM / GRU.

For each shape (T, B, I, H) and configuration (layers, bidirectional) every implementation runs
the same forward (no grad) and forward+backward (gradient of the output given, parameters' grads
set to None first, as ``optimizer.zero_grad()`` does); all candidates of a shape are interleaved
in each round (``layernorm.bench.compare``) and the table shows medians and ratios to torch's
module measured in the same run. Peak memory of one training step: on CUDA
``torch.cuda.max_memory_allocated``; on CPU, torch has no allocator statistics, so the step runs
once under ``torch.profiler`` with ``profile_memory=True`` and the peak of the running sum of its
allocation/free events is reported (bytes allocated by torch during the step, above what existed
before it: the same quantity as the CUDA number).

Implementations:
    torch.nn.LSTM / torch.nn.GRU       torch's module (oneDNN on CPU, cuDNN on CUDA), no LN
    layernorm.LSTM / layernorm.GRU     norm="layer", the fused kernel (``layernorm.rnn.fused``)
    layernorm loop                     norm="layer", ``use_fused = False``: the readable loop
    TorchScript LN-LSTM                a cell-by-cell scripted LN-LSTM in the style of PyTorch's
                                       benchmarks/fastrnns/custom_lstms.py (raw c carried)
    layernorm.LSTM compiled            ``torch.compile`` of the layernorm module (first shape):
                                       "compile s" = its cold compile (first training step and
                                       first inference call, inductor's on-disk caches as found),
                                       "vs eager" = steady fwd+bwd time / the eager module's
    ... autocast-bf16                  both modules under ``torch.autocast("cpu", bfloat16)``
                                       (first shape); ratios against torch's module under
                                       autocast (or torch's bf16 module where this CPU's oneDNN
                                       has no bf16 LSTM, which the row's name then says)
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import os
import time
import warnings

import torch
from torch import nn

from ..bench import compare, format_table

# (T, B, I, H, layers, bidirectional): the main shape (a typical training size) first
CONFIGS = (
    (100, 32, 128, 256, 1, False),
    (100, 32, 128, 256, 2, True),
    (50, 64, 256, 512, 1, False),
    (200, 8, 64, 128, 1, False),
)
QUICK_CONFIGS = ((100, 32, 128, 256, 1, False),)
COLUMNS = ["shape", "layers", "bidir", "impl", "fwd ms", "fwd ratio", "fwd+bwd ms", "ratio",
           "peak MB", "mem ratio", "vs eager", "compile s"]


# ---------------------------------------------------------------------------------------------
# The TorchScript baseline (fastrnns style: one scripted cell, a scripted loop over steps)
# ---------------------------------------------------------------------------------------------

class _ScriptLNLSTMCell(nn.Module):
    """LN-LSTM cell as in fastrnns' LayerNormLSTMCell, except that the raw c is carried."""

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        H = hidden_size
        self.weight_ih = nn.Parameter(torch.randn(4 * H, input_size) / H ** 0.5)
        self.weight_hh = nn.Parameter(torch.randn(4 * H, H) / H ** 0.5)
        self.gain_ih, self.gain_hh = (nn.Parameter(torch.ones(4 * H)) for _ in range(2))
        self.bias_ih, self.bias_hh = (nn.Parameter(torch.zeros(4 * H)) for _ in range(2))
        self.gain_c, self.bias_c = nn.Parameter(torch.ones(H)), nn.Parameter(torch.zeros(H))
        self.hidden_size = H

    def forward(self, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor):
        G, H = 4 * self.hidden_size, self.hidden_size
        igates = torch.nn.functional.layer_norm(torch.mm(x, self.weight_ih.t()), [G],
                                                self.gain_ih, self.bias_ih)
        hgates = torch.nn.functional.layer_norm(torch.mm(h, self.weight_hh.t()), [G],
                                                self.gain_hh, self.bias_hh)
        ingate, forgetgate, cellgate, outgate = (igates + hgates).chunk(4, 1)
        c = torch.sigmoid(forgetgate) * c + torch.sigmoid(ingate) * torch.tanh(cellgate)
        cn = torch.nn.functional.layer_norm(c, [H], self.gain_c, self.bias_c)
        return torch.sigmoid(outgate) * torch.tanh(cn), c


class _ScriptLNLSTMLayer(nn.Module):
    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.cell = _ScriptLNLSTMCell(input_size, hidden_size)

    def forward(self, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor):
        outputs = torch.jit.annotate(list[torch.Tensor], [])
        for t in range(x.shape[0]):
            h, c = self.cell(x[t], h, c)
            outputs += [h]
        return torch.stack(outputs), h, c


class ScriptLNLSTM(nn.Module):
    """Stacked (optionally bidirectional) scripted LN-LSTM with torch.nn.LSTM's call signature."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 bidirectional: bool = False):
        super().__init__()
        D = 2 if bidirectional else 1
        self.hidden_size, self.num_layers, self.D = hidden_size, num_layers, D
        with warnings.catch_warnings():  # torch.jit.script is deprecated; it is the baseline
            warnings.simplefilter("ignore")
            self.layers = nn.ModuleList([
                torch.jit.script(_ScriptLNLSTMLayer(input_size if layer == 0 else D * hidden_size,
                                                    hidden_size))
                for layer in range(num_layers) for _ in range(D)])

    def forward(self, x: torch.Tensor):
        B, H = x.shape[1], self.hidden_size
        zeros = x.new_zeros(B, H)
        for layer in range(self.num_layers):
            outs = []
            for d in range(self.D):
                run = self.layers[layer * self.D + d]
                out = run(x.flip(0) if d else x, zeros, zeros)[0]
                outs.append(out.flip(0) if d else out)
            x = torch.cat(outs, -1) if self.D > 1 else outs[0]
        return x, None


# ---------------------------------------------------------------------------------------------
# Measurement
# ---------------------------------------------------------------------------------------------

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
    The fused kernels' reusable workspace is emptied first, so the buffers it hands out count as
    allocated during ``fn()`` (as they are on a first call)."""
    from . import fused
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


def _implementations(cell: str, I: int, H: int, layers: int, bidirectional: bool,
                     device: str, loop: bool) -> dict[str, nn.Module]:
    import layernorm
    torch_cls = {"lstm": nn.LSTM, "gru": nn.GRU}[cell]
    ours_cls = {"lstm": layernorm.LSTM, "gru": layernorm.GRU}[cell]
    kw = {"num_layers": layers, "bidirectional": bidirectional}
    impls = {f"torch.nn.{cell.upper()}": torch_cls(I, H, **kw),
             f"layernorm.{cell.upper()}": ours_cls(I, H, norm="layer", **kw)}
    if loop:
        readable = ours_cls(I, H, norm="layer", **kw)
        readable.use_fused = False
        impls["layernorm loop"] = readable
    if cell == "lstm":
        impls["TorchScript LN-LSTM"] = ScriptLNLSTM(I, H, **kw)
    return {name: m.to(device) for name, m in impls.items()}


CLOCKS = {"wall": time.perf_counter, "process": time.process_time}
_HALF = torch.bfloat16


def _steps(m, x, grad, autocast: bool = False):
    """(forward without grad, training step) of module m on x; under autocast when asked."""
    def ctx():
        return torch.autocast(x.device.type, _HALF) if autocast else contextlib.nullcontext()

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


def _autocast_pair(cell: str, eager: dict, x, grad):
    """Torch's and our module under autocast bf16: {name: (module, x, autocast?)}; where torch's
    LSTM has no bf16 autocast kernel here, torch's bf16 module (weights and input in bf16)."""
    theirs = eager[f"torch.nn.{cell.upper()}"]
    name = f"torch.nn.{cell.upper()} autocast-bf16"
    pair = {name: (theirs, x, True)}
    try:
        with torch.no_grad(), torch.autocast(x.device.type, _HALF):
            theirs(x)
    except RuntimeError:
        pair = {f"torch.nn.{cell.upper()} bf16 (no autocast LSTM here)":
                (copy.deepcopy(theirs).to(_HALF), x.to(_HALF), False)}
    pair[f"layernorm.{cell.upper()} autocast-bf16"] = (eager[f"layernorm.{cell.upper()}"], x, True)
    return pair


def bench_rnn(configs=CONFIGS, *, cells=("lstm", "gru"), repeat: int = 7, warmup: int = 2,
              device: str = "cpu", loop_on_first: bool = True, progress: bool = True,
              clock: str = "wall", extras_on_first: bool = True,
              compile_backend: str = "inductor") -> list[dict]:
    """One row per (config, cell, implementation); see the module docstring for what is timed.
    ``extras_on_first``: the torch.compile (with ``compile_backend``) and autocast rows on the
    first config."""
    from tqdm import tqdm
    rows = []
    jobs = [(cfg, cell) for cfg in configs for cell in cells]
    for i, ((T, B, I, H, layers, bidir), cell) in enumerate(tqdm(jobs, desc="bench rnn",
                                                                  disable=not progress)):
        torch.manual_seed(0)
        impls = _implementations(cell, I, H, layers, bidir, device, loop_on_first and i < 2)
        x = torch.randn(T, B, I, device=device)
        grad = torch.randn(T, B, H * (2 if bidir else 1), device=device)
        anchor, ours = f"torch.nn.{cell.upper()}", f"layernorm.{cell.upper()}"
        groups = [{name: (m, x, False) for name, m in impls.items()}]
        compile_s = {}
        extras = extras_on_first and i < len(cells)
        if extras:
            compiled = f"{ours} compiled"
            torch._dynamo.reset()
            t0 = time.perf_counter()
            with warnings.catch_warnings():  # inductor's imports warn about torch.jit
                warnings.simplefilter("ignore", DeprecationWarning)
                cm = torch.compile(impls[ours], backend=compile_backend)
                fwd, step = _steps(cm, x, grad)
                step()
                fwd()
            compile_s[compiled] = time.perf_counter() - t0
            groups[0][compiled] = (cm, x, False)
            groups.append(_autocast_pair(cell, impls, x, grad))
        for g, group in enumerate(groups):
            fns = {}
            for name, (m, xin, ac) in group.items():
                fns[(name, "fwd")], fns[(name, "fb")] = _steps(m, xin, grad, ac)
            ms = compare(fns, warmup=warmup, repeat=repeat, device=device, clock=CLOCKS[clock])
            mem = {name: peak_memory_mb(fns[(name, "fb")], device) for name in group}
            ref = anchor if g == 0 else next(iter(group))
            for name in group:
                row = {
                    "shape": f"{T}x{B}x{I}x{H}", "T": T, "B": B, "I": I, "H": H,
                    "layers": layers, "bidir": bidir, "cell": cell, "impl": name,
                    "fwd ms": ms[(name, "fwd")], "fwd ratio": ms[(name, "fwd")] / ms[(ref, "fwd")],
                    "fwd+bwd ms": ms[(name, "fb")], "ratio": ms[(name, "fb")] / ms[(ref, "fb")],
                    "peak MB": mem[name], "mem ratio": mem[name] / mem[ref]}
                if name in compile_s:
                    row["compile s"] = compile_s[name]
                    row["vs eager"] = ms[(name, "fb")] / ms[(ours, "fb")]
                rows.append(row)
        torch._dynamo.reset()
    return rows


def kernel_build_seconds() -> float | None:
    """Seconds to compile the C kernels from scratch (into a temporary cache, as on first use),
    or None when no C compiler is available (torch ops are used then)."""
    import tempfile
    from pathlib import Path

    from . import _native
    cc = _native.compiler()
    if not cc:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        try:
            _native._build(cc, Path(tmp) / "k.so")
        except Exception:  # noqa: BLE001 - no working compiler: torch ops are used
            return None
        return time.perf_counter() - t0


def _parse_shape(s: str) -> tuple[int, int, int, int]:
    try:
        T, B, I, H = (int(v) for v in s.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a shape TxBxIxH such as 100x32x128x256, "
                                         f"received {s!r}") from None
    if min(T, B, I, H) < 1:
        raise argparse.ArgumentTypeError(f"expected a shape TxBxIxH of sizes >= 1 such as "
                                         f"100x32x128x256, received {s!r}")
    return T, B, I, H


def _run(args: argparse.Namespace) -> int:
    from .._io import atomic_write_json
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.shapes:
        configs = tuple((*shape, layers, args.bidirectional) for shape in args.shapes
                        for layers in args.layers)
    else:
        configs = QUICK_CONFIGS if args.quick else CONFIGS
    repeat = args.repeat or (5 if args.quick else 7)
    rows = bench_rnn(configs, cells=args.cells, repeat=repeat, warmup=args.warmup,
                     device=args.device, loop_on_first=not args.no_loop, clock=args.clock,
                     extras_on_first=not args.no_extras)
    print(f"LN-LSTM / LN-GRU vs torch.nn.LSTM / GRU (no LN), fp32, {args.device}, "
          f"median of {repeat} interleaved rounds after {args.warmup} warm-up, {args.clock} "
          f"time (torch {torch.__version__}, {torch.get_num_threads()} threads). ratio = "
          f"fwd+bwd time / torch's (the autocast rows: / torch's autocast row); peak MB = memory "
          f"allocated during one training step; vs eager = compiled / eager layernorm module.")
    print(format_table(rows, COLUMNS))
    build = kernel_build_seconds() if args.device == "cpu" else None
    print("C kernels: " + ("no C compiler here, torch ops used" if build is None else
                           f"first-use compile {build:.2f} s (then cached per CPU)"))
    if args.json:
        atomic_write_json(args.json, rows)
        print(f"wrote {args.json}")
    return 0


def add_command(bench_subparsers) -> None:
    """Register ``rnn`` under ``layernorm bench``."""
    p = bench_subparsers.add_parser(
        "rnn", help="LN-LSTM/LN-GRU (fused) vs torch.nn.LSTM/GRU: time, ratios, peak memory")
    p.add_argument("--quick", action="store_true",
                   help="only the main shape (100x32x128x256, 1 layer), 5 rounds")
    p.add_argument("--shapes", nargs="+", type=_parse_shape, metavar="TxBxIxH",
                   help="shapes to run instead of the defaults, e.g. 100x32x128x256")
    p.add_argument("--layers", nargs="+", type=int, default=[1],
                   help="with --shapes: numbers of layers (default 1)")
    p.add_argument("--bidirectional", action="store_true", help="with --shapes: bidirectional")
    p.add_argument("--cells", nargs="+", choices=["lstm", "gru"], default=["lstm", "gru"])
    p.add_argument("--repeat", type=int, default=None, help="timed rounds (default 7; 5 quick)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--no-loop", action="store_true",
                   help="skip the (slow) readable-loop rows on the first shape")
    p.add_argument("--no-extras", action="store_true",
                   help="skip the torch.compile and autocast-bf16 rows on the first shape")
    p.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's)")
    p.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                   help="wall (default) or process CPU time: on a machine shared with other "
                        "jobs, --threads 1 --clock process gives stable ratios")
    p.add_argument("--device", default="cpu")
    p.add_argument("--json", help="also write the rows to this JSON file")
    p.set_defaults(func=_run)

"""``layernorm bench rnn``: LN-LSTM / LN-GRU speed and memory against torch.nn.LSTM / GRU.

For each shape (T, B, I, H) and configuration (layers, bidirectional) every implementation runs
the same forward (no grad) and forward+backward (gradient of the output given, parameters' grads
set to None first, as ``optimizer.zero_grad()`` does); all candidates of a shape are interleaved
in each round (``harness.compare``) and the table shows medians and ratios to torch's module
measured in the same run, with the peak memory of one training step
(``memory.peak_memory_mb``). First the machine: the CPU's vector / matrix features, what the C
kernels were built for and one large sgemm's rate;
then per float32 row the share of its time that the same GEMMs take through ``torch.mm``
(``gemm_steps``, in the same rounds), so a row shows how close to the GEMM limit it runs.
Then the step tables of ``cells``: the cells at batch 1 and 32, and BN-LSTM vs LN-LSTM; then
variable-length batches packed and padded (``bench_packed``), inference at batch 1 to 256
and training at batch 1 to 32 (``bench_inference``; the kernels' threads split each step's
products by columns below 4 rows a thread, by rows above) and a 2-layer stack called one step
at a time at batch 1, as a decoder runs it (``decode.bench_decode``); with ``--tables
regularizers``, LN-LSTM / LN-GRU with each recurrent regularizer against the same
module without one (``regularizers.bench_regularizers``).

Implementations:
    torch.nn.LSTM / torch.nn.GRU       torch's module (oneDNN on CPU, cuDNN on CUDA), no LN
    layernorm.LSTM / layernorm.GRU     norm="layer", the fused kernel (``layernorm.rnn.fused``)
    layernorm loop                     norm="layer", ``use_fused = False``: the readable loop
    TorchScript LN-LSTM                a cell-by-cell scripted LN-LSTM in the style of PyTorch's
                                       benchmarks/fastrnns/custom_lstms.py (raw c carried;
                                       ``baseline``)
    layernorm.LSTM compiled            ``torch.compile`` of the layernorm module (first shape):
                                       "compile s" = its cold compile (first training step and
                                       first inference call, inductor's on-disk caches as found),
                                       "vs eager" = steady fwd+bwd time / the eager module's
    ... autocast-bf16                  both modules under ``torch.autocast("cpu", bfloat16)``
                                       (first shape); ratios against torch's module under
                                       autocast (or torch's bf16 module where this CPU's oneDNN
                                       has no bf16 LSTM, which the row's name then says)
    ... bf16                           both modules converted to bfloat16 (weights and input),
                                       first shape; ratios against torch's bf16 module
"""
from __future__ import annotations

import argparse
import copy
import time
import warnings

import torch
from torch import nn

from .._io import atomic_write_json, format_table
from .baseline import ScriptLNLSTM
from .cells import BN_COLUMNS, CELL_BATCHES, CELL_COLUMNS, bench_bn_lstm, bench_cells
from .decode import DECODE_COLUMNS, DECODE_LAYERS, bench_decode
from .harness import CLOCKS, compare, cpu_features, gemm_gflops, machine, module_steps
from .memory import peak_memory_mb
from .regularizers import REG_COLUMNS, bench_regularizers

# (T, B, I, H, layers, bidirectional): the main shape (a typical training size) first
CONFIGS = (
    (100, 32, 128, 256, 1, False),
    (100, 32, 128, 256, 2, True),
    (50, 64, 256, 512, 1, False),
    (200, 8, 64, 128, 1, False),
)
QUICK_CONFIGS = ((100, 32, 128, 256, 1, False),)
COLUMNS = ["shape", "layers", "bidir", "impl", "fwd ms", "fwd ratio", "fwd+bwd ms", "ratio",
           "fwd of mm", "of mm", "GFLOP/s", "peak MB", "mem ratio", "vs eager", "compile s"]
TABLES = ("modules", "cells", "bn", "packed", "inference", "training", "decode")
# tables run only when --tables names them
EXTRA_TABLES = ("regularizers",)
PACKED_COLUMNS = ["shape", "impl", "input", "fwd ms", "fwd ratio", "fwd+bwd ms", "ratio"]
INFERENCE_COLUMNS = ["shape", "cell", "B", "impl", "ms", "ratio"]
INFERENCE_BATCHES = (1, 8, 32, 256)
TRAINING_BATCHES = (1, 4, 8, 16, 32)
# an IMDb-like batch (docs/reproduce.md): T, B, I (embedding), H; lengths spread over [T / 5, T]
PACKED_SHAPE = (100, 64, 64, 128)
_HALF = torch.bfloat16


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


def _autocast_pair(cell: str, eager: dict, x):
    """Torch's and our module under autocast bf16: {name: (module, x, autocast dtype or None)};
    where torch's LSTM has no bf16 autocast kernel here, torch's bf16 module (weights and input in
    bf16)."""
    theirs = eager[f"torch.nn.{cell.upper()}"]
    name = f"torch.nn.{cell.upper()} autocast-bf16"
    pair = {name: (theirs, x, _HALF)}
    try:
        with torch.no_grad(), torch.autocast(x.device.type, _HALF):
            theirs(x)
    except RuntimeError:
        pair = {f"torch.nn.{cell.upper()} bf16 (no autocast LSTM here)":
                (copy.deepcopy(theirs).to(_HALF), x.to(_HALF), None)}
    pair[f"layernorm.{cell.upper()} autocast-bf16"] = (eager[f"layernorm.{cell.upper()}"], x, _HALF)
    return pair


def _bf16_pair(cell: str, eager: dict, x):
    """Both modules converted to bfloat16, on a bfloat16 input."""
    return {f"{name} bf16": (copy.deepcopy(eager[name]).to(_HALF), x.to(_HALF), None)
            for name in (f"torch.nn.{cell.upper()}", f"layernorm.{cell.upper()}")}


def _input_product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b^T through ``layernorm.ops.input_linear`` (the LN cells' input GEMM: the C kernels'
    GEMM on torch's threads where they are loaded), for ``gemm_gflops``."""
    from layernorm.ops import input_linear
    return input_linear(a.unsqueeze(0), b)


def gemm_steps(T: int, B: int, I: int, H: int, layers: int, bidirectional: bool, gates: int):
    """The GEMMs of an LSTM (``gates`` 4) / GRU (3) stack through ``torch.mm``, one call each as
    a time loop makes them -> (forward, forward+backward, forward GFLOP, forward+backward GFLOP).

    Per layer and direction (G = gates H, I_l the layer's input width): forward, the input term
    of all steps (T B, I_l) x (I_l, G) and T recurrent (B, H) x (H, G); backward, T products
    (B, G) x (G, H) for the gradient of h_{t-1}, dW_hh and dW_ih over all steps, and the input's
    gradient (T B, G) x (G, I_l) above the first layer (the benchmark's input needs none). Every
    implementation of a row computes these products, so their time through ``torch.mm`` measured
    in the same rounds tells how close to the GEMM limit a whole implementation runs."""
    G, D = gates * H, 2 if bidirectional else 1
    fwd_parts, bwd_parts, flops_f, flops_b = [], [], 0, 0

    def mm(m, k, n, times=1):
        a, b, out = torch.randn(m, k), torch.randn(k, n), torch.empty(m, n)
        return [lambda: torch.mm(a, b, out=out)] * times, 2 * m * k * n * times
    for layer in range(layers):
        width = I if layer == 0 else H * D
        for _ in range(D):
            for parts, (calls, f) in ((fwd_parts, mm(T * B, width, G)),
                                      (fwd_parts, mm(B, H, G, T)),
                                      (bwd_parts, mm(B, G, H, T)), (bwd_parts, mm(G, T * B, H)),
                                      (bwd_parts, mm(G, T * B, width))):
                parts += calls
                if parts is fwd_parts:
                    flops_f += f
                else:
                    flops_b += f
            if layer:
                calls, f = mm(T * B, G, width)
                bwd_parts += calls
                flops_b += f

    def forward():
        for fn in fwd_parts:
            fn()

    def forward_backward():
        forward()
        for fn in bwd_parts:
            fn()
    return forward, forward_backward, flops_f / 1e9, (flops_f + flops_b) / 1e9


def bench_rnn(configs=CONFIGS, *, cells=("lstm", "gru"), repeat: int = 7, warmup: int = 2,
              device: str = "cpu", loop_on_first: bool = True, progress: bool = True,
              clock: str = "wall", extras_on_first: bool = True,
              compile_backend: str = "inductor") -> list[dict]:
    """One row per (config, cell, implementation); see the module docstring for what is timed.
    ``extras_on_first``: the torch.compile (with ``compile_backend``), autocast and bf16 rows on
    the first config."""
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
        groups = [{name: (m, x, None) for name, m in impls.items()}]
        mm_fwd, mm_fb, gflop_f, gflop_fb = gemm_steps(T, B, I, H, layers, bidir,
                                                      {"lstm": 4, "gru": 3}[cell])
        compile_s = {}
        if extras_on_first and i < len(cells):
            compiled = f"{ours} compiled"
            torch._dynamo.reset()
            t0 = time.perf_counter()
            with warnings.catch_warnings():  # inductor's imports warn about torch.jit
                warnings.simplefilter("ignore", DeprecationWarning)
                cm = torch.compile(impls[ours], backend=compile_backend)
                fwd, step = module_steps(cm, x, grad)
                step()
                fwd()
            compile_s[compiled] = time.perf_counter() - t0
            groups[0][compiled] = (cm, x, None)
            groups.append(_autocast_pair(cell, impls, x))
            groups.append(_bf16_pair(cell, impls, x))
        for g, group in enumerate(groups):
            fns = {}
            for name, (m, xin, ac) in group.items():
                fns[(name, "fwd")], fns[(name, "fb")] = module_steps(m, xin, grad, ac)
            if g == 0:  # the same GEMMs through torch.mm, in the same rounds (float32 rows)
                fns[("mm", "fwd")], fns[("mm", "fb")] = mm_fwd, mm_fb
            ms = compare(fns, warmup=warmup, repeat=repeat, device=device, clock=CLOCKS[clock])
            mem = {name: peak_memory_mb(fns[(name, "fb")], device) for name in group}
            ref = anchor if g == 0 else next(iter(group))
            for name in group:
                row = {
                    "table": "modules", "shape": f"{T}x{B}x{I}x{H}", "T": T, "B": B, "I": I,
                    "H": H, "layers": layers, "bidir": bidir, "cell": cell, "impl": name,
                    "fwd ms": ms[(name, "fwd")], "fwd ratio": ms[(name, "fwd")] / ms[(ref, "fwd")],
                    "fwd+bwd ms": ms[(name, "fb")], "ratio": ms[(name, "fb")] / ms[(ref, "fb")],
                    "peak MB": mem[name], "mem ratio": mem[name] / mem[ref]}
                if g == 0:  # the share of the time torch.mm would take for the same GEMMs
                    row.update({"fwd of mm": ms[("mm", "fwd")] / ms[(name, "fwd")],
                                "of mm": ms[("mm", "fb")] / ms[(name, "fb")],
                                "GFLOP/s": gflop_fb / ms[(name, "fb")] * 1e3,
                                "mm GFLOP/s": gflop_fb / ms[("mm", "fb")] * 1e3})
                if name in compile_s:
                    row["compile s"] = compile_s[name]
                    row["vs eager"] = ms[(name, "fb")] / ms[(ours, "fb")]
                rows.append(row)
        torch._dynamo.reset()
    return rows


def bench_packed(shape=PACKED_SHAPE, *, cells=("lstm", "gru"), repeat: int = 7, warmup: int = 2,
                 device: str = "cpu", clock: str = "wall") -> list[dict]:
    """Variable-length batches, per cell: torch's module on the padded batch (the anchor) and on
    the same batch packed, ``layernorm.LSTM`` / ``GRU`` with ``norm="none"`` (torch's module;
    packed input runs the C time loop without normalization) and ``norm="layer"`` packed; one
    layer, training mode, lengths spread uniformly over [T / 5, T] (the longest T)."""
    import layernorm
    from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence
    T, B, I, H = shape
    rows = []
    for cell in cells:
        torch.manual_seed(0)
        ours_cls, anchor = getattr(layernorm, cell.upper()), f"torch.nn.{cell.upper()}"
        theirs = getattr(nn, cell.upper())(I, H).to(device)
        impls = {anchor: theirs,
                 f'layernorm.{cell.upper()} norm="none"': ours_cls.from_torch(theirs, norm="none"),
                 f'layernorm.{cell.upper()} norm="layer"': ours_cls(I, H, norm="layer").to(device)}
        x = torch.randn(T, B, I, device=device)
        lengths = torch.randint(max(1, T // 5), T + 1, (B,))
        lengths[0] = T
        packed = pack_padded_sequence(x, lengths, enforce_sorted=False)
        cases = [(anchor, "padded", x)] + [(name, "packed", packed) for name in impls]

        def steps(m, inp):
            def forward():
                with torch.no_grad():
                    m(inp)

            def train_step():
                for p in m.parameters():
                    p.grad = None
                out = m(inp)[0]
                (out.data if isinstance(out, PackedSequence) else out).sum().backward()
            return forward, train_step
        fns = {}
        for name, kind, inp in cases:
            fns[(name, kind, "fwd")], fns[(name, kind, "fb")] = steps(impls[name], inp)
        ms = compare(fns, warmup=warmup, repeat=repeat, device=device, clock=CLOCKS[clock])
        ref = (anchor, "padded")
        rows += [{"table": "packed", "shape": f"{T}x{B}x{I}x{H}", "T": T, "B": B, "I": I, "H": H,
                  "cell": cell, "impl": name, "input": kind, "fwd ms": ms[(name, kind, "fwd")],
                  "fwd ratio": ms[(name, kind, "fwd")] / ms[(*ref, "fwd")],
                  "fwd+bwd ms": ms[(name, kind, "fb")],
                  "ratio": ms[(name, kind, "fb")] / ms[(*ref, "fb")]} for name, kind, _ in cases]
    return rows


def bench_inference(T: int, I: int, H: int, *, batches=INFERENCE_BATCHES, cells=("lstm", "gru"),
                    repeat: int = 7, warmup: int = 2, device: str = "cpu",
                    clock: str = "wall", train: bool = False) -> list[dict]:
    """Inference: eval-mode modules under ``torch.inference_mode`` (no graph, nothing saved for
    a backward), ours (norm="layer") against torch's, one layer, at each batch size; ratio =
    time / torch's. ``train``: the "training" table instead, training-mode modules, a training
    step each (``harness.module_steps``: grads set to None, forward, backward of ones)."""
    import layernorm
    rows = []
    for cell in cells:
        for B in batches:
            torch.manual_seed(0)
            impls = {f"torch.nn.{cell.upper()}": getattr(nn, cell.upper())(I, H),
                     f"layernorm.{cell.upper()}": getattr(layernorm, cell.upper())(
                         I, H, norm="layer")}
            x = torch.randn(T, B, I, device=device)
            fns = {}
            for name, m in impls.items():
                m = m.to(device).train(train)

                def run(m=m):
                    with torch.inference_mode():
                        m(x)
                fns[name] = module_steps(m, x, x.new_ones(T, B, H))[1] if train else run
            ms = compare(fns, warmup=warmup, repeat=repeat, device=device, clock=CLOCKS[clock])
            anchor = f"torch.nn.{cell.upper()}"
            rows += [{"table": "training" if train else "inference", "shape": f"{T}x{B}x{I}x{H}",
                      "cell": cell, "T": T,
                      "B": B, "I": I, "H": H, "impl": name, "ms": ms[name],
                      "ratio": ms[name] / ms[anchor]} for name in impls]
    return rows


def kernel_isa() -> str:
    """What the C kernels were built for here (``layernorm.ops.build.describe``)."""
    from layernorm.ops import build
    return build.describe()


def kernel_build_seconds() -> float | None:
    """Seconds to compile the C kernels from scratch (``layernorm.ops.build.build_seconds``), or
    None when no C compiler is available (torch ops are used then)."""
    from layernorm.ops import build
    return build.build_seconds()


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


def _positive(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, received {s!r}")
    return v


def _run(args: argparse.Namespace) -> int:
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.shapes:
        configs = tuple((*shape, layers, args.bidirectional) for shape in args.shapes
                        for layers in args.layers)
    else:
        configs = QUICK_CONFIGS if args.quick else CONFIGS
    repeat = args.repeat or (5 if args.quick else 7)
    T, B, I, H = configs[0][:4]
    timing = (f"median of {repeat} interleaved rounds after {args.warmup} warm-up, {args.clock} "
              f"time ({machine()})")
    rows = []
    if args.device == "cpu":
        print(f"CPU: {cpu_features()}; {kernel_isa()}")
        print(f"one (2048, 2048) x (2048, 2048) product: torch.mm {gemm_gflops():.0f} GFLOP/s, "
              f"the LN cells' input GEMM (layernorm.ops.input_linear) "
              f"{gemm_gflops(product=_input_product):.0f} GFLOP/s ({machine()})")
    if "modules" in args.tables:
        rows += bench_rnn(configs, cells=args.cells, repeat=repeat, warmup=args.warmup,
                          device=args.device, loop_on_first=not args.no_loop, clock=args.clock,
                          extras_on_first=not args.no_extras)
        print(f"LN-LSTM / LN-GRU vs torch.nn.LSTM / GRU (no LN), fp32 unless the row says, "
              f"{args.device}, {timing}. ratio = fwd+bwd time / torch's (the autocast and bf16 "
              f"rows: / torch's row of the same group); peak MB = memory allocated during one "
              f"training step; vs eager = compiled / eager layernorm module; of mm = the time "
              f"the same GEMMs take through torch.mm, one call each, measured in the same rounds / this row's "
              f"time (fwd of mm: forward without grad; 1.0 = as fast as its GEMMs alone); "
              f"GFLOP/s = those GEMMs' FLOPs / fwd+bwd time.")
        print(format_table([r for r in rows if r["table"] == "modules"], COLUMNS))
    if "cells" in args.tables:
        cell_rows = bench_cells(T, I, H, batches=args.cell_batches, cells=args.cells,
                                repeat=repeat, warmup=args.warmup, device=args.device,
                                clock=args.clock)
        print(f"\nCells, norm=layer, {T} steps of one call each (I={I}, H={H}), fp32, "
              f"{args.device}, {timing}. fwd: no grad; fwd+bwd: backward from the last h "
              f"through every step; ratios to torch's cell.")
        print(format_table(cell_rows, CELL_COLUMNS))
        rows += cell_rows
    if "bn" in args.tables and "lstm" in args.cells:
        bn_rows = []
        for shape in dict.fromkeys(cfg[:4] for cfg in configs):   # each shape once, in order
            bn_rows += bench_bn_lstm(shape, repeat=repeat, warmup=args.warmup,
                                     device=args.device, clock=args.clock, loop=not args.no_loop)
        print(f"\nBN-LSTM vs LN-LSTM, one layer, training mode, fp32, {args.device}, {timing}. "
              f"ratio = fwd+bwd / torch.nn.LSTM's; ms/step = fwd+bwd / T; vs LN-LSTM = fwd+bwd / "
              f"LN-LSTM's; BN-LSTM = the fused C time loop, loop = the readable path.")
        print(format_table(bn_rows, BN_COLUMNS))
        rows += bn_rows
    if "packed" in args.tables:
        shape = PACKED_SHAPE if not args.shapes else configs[0][:4]
        packed_rows = bench_packed(shape, cells=args.cells, repeat=repeat, warmup=args.warmup, device=args.device,
                                   clock=args.clock)
        print(f"\nVariable lengths (uniform over [T/5, T]), one layer, training mode, fp32, "
              f"{args.device}, {timing}. ratio = time / torch's module on the padded batch; "
              f"norm=\"none\" is torch's module (packed input: the C loop without LN).")
        print(format_table(packed_rows, PACKED_COLUMNS))
        rows += packed_rows
    if "inference" in args.tables:
        inf_rows = bench_inference(T, I, H, cells=args.cells, repeat=repeat, warmup=args.warmup,
                                   device=args.device, clock=args.clock)
        print(f"\nInference (eval, torch.inference_mode), one layer, T={T}, I={I}, H={H}, fp32, "
              f"{args.device}, {timing}. ratio = time / torch's module.")
        print(format_table(inf_rows, INFERENCE_COLUMNS))
        rows += inf_rows
    if "training" in args.tables:
        tr_rows = bench_inference(T, I, H, batches=TRAINING_BATCHES, cells=args.cells,
                                  repeat=repeat, warmup=args.warmup, device=args.device,
                                  clock=args.clock, train=True)
        print(f"\nTraining by batch, one layer, T={T}, I={I}, H={H}, fp32, {args.device}, "
              f"{timing}. ms = a training step (forward, backward); ratio = time / torch's.")
        print(format_table(tr_rows, INFERENCE_COLUMNS))
        rows += tr_rows
    if "decode" in args.tables:
        dec_rows = bench_decode(T, I, H, cells=args.cells, repeat=repeat, warmup=args.warmup,
                                device=args.device, clock=args.clock)
        print(f"\nDecode: a {DECODE_LAYERS}-layer stack (norm=layer) called {T} times with one "
              f"step (T = 1) at batch 1, the state carried, fp32, {args.device}, {timing}. fwd: "
              f"no grad; fwd+bwd: backward from the last h_n through every call; ratios to "
              f"torch's module called the same way.")
        print(format_table(dec_rows, DECODE_COLUMNS))
        rows += dec_rows
    if "regularizers" in args.tables:
        reg_rows = bench_regularizers(configs[0][:4], cells=args.cells, repeat=repeat,
                                      warmup=args.warmup, device=args.device, clock=args.clock)
        print(f"\nRecurrent regularizers, LN-LSTM / LN-GRU (norm=layer), one layer, training "
              f"mode (masks sampled every call), fp32, {args.device}, {timing}. ratio = "
              f"fwd+bwd / the same module without a regularizer (row 'none'); path = where "
              f"the regularized recurrence ran.")
        print(format_table(reg_rows, REG_COLUMNS))
        rows += reg_rows
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
        "rnn", help="LN-LSTM/LN-GRU (fused) vs torch.nn.LSTM/GRU: time, ratios, peak memory; "
                    "cells at batch 1 and 32; BN-LSTM vs LN-LSTM")
    p.add_argument("--quick", action="store_true",
                   help="only the main shape (100x32x128x256, 1 layer), 5 rounds")
    p.add_argument("--shapes", nargs="+", type=_parse_shape, metavar="TxBxIxH",
                   help="shapes to run instead of the defaults, e.g. 100x32x128x256 (the cell "
                        "table uses the first: T steps, its I and H; the BN-LSTM table each)")
    p.add_argument("--layers", nargs="+", type=int, default=[1],
                   help="with --shapes: numbers of layers (default 1)")
    p.add_argument("--bidirectional", action="store_true", help="with --shapes: bidirectional")
    p.add_argument("--cells", nargs="+", choices=["lstm", "gru"], default=["lstm", "gru"])
    p.add_argument("--tables", nargs="+", choices=TABLES + EXTRA_TABLES, default=list(TABLES),
                   help="modules: whole sequences vs torch.nn.LSTM / GRU; cells: LSTMCell / "
                        "GRUCell vs torch's; bn: BN-LSTM vs LN-LSTM; packed: variable lengths, "
                        "packed vs padded; inference: eval + inference_mode at batch 1, 8, 32, "
                        "256; training: fwd+bwd at batch 1, 4, 8, 16, 32; decode: a 2-layer "
                        "stack one step per call at batch 1 (default: those seven); "
                        "regularizers: LN-LSTM / LN-GRU with recurrent dropout, zoneout, "
                        "DropConnect vs without (first shape)")
    p.add_argument("--cell-batches", nargs="+", type=_positive, default=list(CELL_BATCHES),
                   metavar="B", help="batch sizes of the cell table (default 1 32)")
    p.add_argument("--repeat", type=_positive, default=None,
                   help="timed rounds (default 7; 5 quick)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--no-loop", action="store_true",
                   help="skip the (slow) readable-loop rows (first shape; BN-LSTM table)")
    p.add_argument("--no-extras", action="store_true",
                   help="skip the torch.compile, autocast-bf16 and bf16 rows on the first shape")
    p.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's)")
    p.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                   help="wall (default) or process CPU time: on a machine shared with other "
                        "jobs, --threads 1 --clock process gives stable ratios")
    p.add_argument("--device", default="cpu")
    p.add_argument("--json", help="also write the rows (each with its \"table\") to this JSON "
                                  "file")
    p.set_defaults(func=_run)

"""GPU benchmark of layernorm.kernels (Triton): ratios against torch measured in the same run.

    PYTHONPATH=src python benchmarks/gpu_bench.py --json OUT.json [--quick]

RNN rows (fwd = no-grad forward, fwd+bwd = one training step), per cell, shape TxBxIxH, dtype:
    triton        layernorm.LSTM / GRU(norm="layer"): the Triton step kernels (layernorm.kernels)
    torch-ops     the same module with the kernels off: rnn.fused's loop of torch ops (the CUDA
                  path before the kernels)
    cuDNN         torch.nn.LSTM / GRU (no LN): the anchor of "ratio"
Norm rows, 16384x4096 (bf16, and fp32): GB/s of the bytes each pass must move (fwd: read x, write
y; fwd+bwd: + read x, dy, write dx) against a device-to-device copy of x measured in the same
run ("of copy"), and ratio against torch.nn.RMSNorm / nn.LayerNorm.
Medians of interleaved rounds after warm-up (layernorm_paper.bench.compare).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch
from torch import nn

import layernorm
import layernorm.kernels as K
from layernorm_paper.bench import compare, format_table

RNN_SHAPES = ((100, 32, 128, 256), (512, 64, 1024, 1024))
NORM_SHAPES = ((16384, 4096),)
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
DEVICE = "cuda"  # "cpu" only for --smoke: the script's own check, interpreted at toy sizes


def _sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def _allocated() -> int:
    return torch.cuda.memory_allocated() if DEVICE == "cuda" else 0


def _modules(cell: str, I: int, H: int, dtype):
    ours_cls = {"lstm": layernorm.LSTM, "gru": layernorm.GRU}[cell]
    torch_cls = {"lstm": nn.LSTM, "gru": nn.GRU}[cell]
    torch.manual_seed(0)
    ours = ours_cls(I, H, norm="layer").to(DEVICE).to(dtype)
    return ours, torch_cls(I, H).to(DEVICE).to(dtype)


def _gpu_busy(fn) -> float | None:
    """Fraction of one call's wall time the GPU spends in kernels (torch.profiler): well below 1
    means the step loop is bound by launches on the CPU side (then CUDA graphs would pay)."""
    if DEVICE != "cuda":
        return None
    from torch.profiler import ProfilerActivity, profile
    try:
        fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            wall_us = (time.perf_counter() - t0) * 1e6
        kernels_us = sum(e.self_device_time_total for e in prof.key_averages()
                         if e.device_type == torch.autograd.DeviceType.CUDA)
        return kernels_us / wall_us
    except Exception as e:  # noqa: BLE001 - a diagnostic only: never stop the benchmark
        print(f"  (gpu busy not measured: {e!r})", file=sys.stderr)
        return None


def bench_rnn(shapes, dtypes, cells, repeat: int, warmup: int) -> list[dict]:
    rows = []
    for (T, B, I, H) in shapes:
        for dname in dtypes:
            dtype = DTYPES[dname]
            for cell in cells:
                t0 = time.perf_counter()
                ours, theirs = _modules(cell, I, H, dtype)
                x = torch.randn(T, B, I, device=DEVICE, dtype=dtype)
                grad = torch.randn(T, B, H, device=DEVICE, dtype=dtype)

                def run(m, kernels: bool, train: bool):
                    def fn():
                        K.ENABLED = kernels
                        if train:
                            for p in m.parameters():
                                p.grad = None
                            m(x)[0].backward(grad)
                        else:
                            with torch.no_grad():
                                m(x)
                    return fn

                impls = {"triton": (ours, True), "torch-ops": (ours, False),
                         "cuDNN": (theirs, True)}
                fns = {(name, mode): run(m, k, mode == "fb") for name, (m, k) in impls.items()
                       for mode in ("fwd", "fb")}
                ms = compare(fns, warmup=warmup, repeat=repeat, device=DEVICE)
                # the two paths of our module agree (a sanity check of the timed code)
                with torch.no_grad():
                    K.ENABLED = True
                    a = ours(x)[0]
                    K.ENABLED = False
                    b = ours(x)[0]
                    K.ENABLED = True
                diff = float((a.float() - b.float()).abs().max())
                busy = _gpu_busy(run(ours, True, True))
                peak = {}
                for name, (m, k) in impls.items():
                    _sync()
                    if DEVICE == "cuda":
                        torch.cuda.reset_peak_memory_stats()
                    base = _allocated()
                    run(m, k, True)()
                    _sync()
                    peak[name] = ((torch.cuda.max_memory_allocated() if DEVICE == "cuda" else 0)
                                  - base) / 2 ** 20
                for name in impls:
                    rows.append({
                        "cell": cell, "shape": f"{T}x{B}x{I}x{H}", "dtype": dname, "impl": name,
                        "fwd ms": ms[(name, "fwd")],
                        "fwd ratio": ms[(name, "fwd")] / ms[("cuDNN", "fwd")],
                        "fwd+bwd ms": ms[(name, "fb")],
                        "ratio": ms[(name, "fb")] / ms[("cuDNN", "fb")],
                        "vs torch-ops": ms[("torch-ops", "fb")] / ms[(name, "fb")],
                        "peak MB": peak[name], "max|triton - torch-ops|": diff,
                        "gpu busy": busy if name == "triton" else None})
                print(f"  {cell} {T}x{B}x{I}x{H} {dname}: {time.perf_counter() - t0:.1f} s",
                      file=sys.stderr, flush=True)
    return rows


def bench_norms(shapes, dtypes, repeat: int, warmup: int) -> list[dict]:
    rows = []
    for (N, D) in shapes:
        for dname in dtypes:
            dtype = DTYPES[dname]
            x = torch.randn(N, D, device=DEVICE, dtype=dtype, requires_grad=True)
            dy = torch.randn(N, D, device=DEVICE, dtype=dtype)
            dst = torch.empty_like(x)
            nbytes = x.numel() * x.element_size()
            mods = {
                "rms triton": (layernorm.RMSNorm(D), "rms_norm", True),
                "rms torch.nn.RMSNorm": (nn.RMSNorm(D, eps=1e-5), None, False),
                "rms layernorm (torch ops)": (layernorm.RMSNorm(D), "rms_norm", False),
                "layer triton": (layernorm.LayerNorm(D), "layer_norm", True),
                "layer torch.nn.LayerNorm": (nn.LayerNorm(D), None, False),
            }
            for m, *_ in mods.values():
                m.to(DEVICE).to(dtype)

            def run(m, which, triton_on, train):
                params = [x, *m.parameters()]

                def fn():
                    K.ENABLED = triton_on
                    if which:
                        K.NORMS[which] = triton_on
                    y = m(x)
                    if train:
                        torch.autograd.grad(y, params, dy)
                return fn

            fns = {"copy": lambda: dst.copy_(x.detach())}
            for name, (m, which, on) in mods.items():
                fns[(name, "fwd")] = run(m, which, on, False)
                fns[(name, "fb")] = run(m, which, on, True)
            ms = compare(fns, warmup=warmup, repeat=repeat, device=DEVICE)
            K.ENABLED = True
            K.NORMS.update(rms_norm=True, layer_norm=False)
            copy_gbs = 2 * nbytes / ms["copy"] / 1e6
            rows.append({"shape": f"{N}x{D}", "dtype": dname, "impl": "copy (d2d)",
                         "fwd ms": ms["copy"], "fwd GB/s": copy_gbs})
            for name in mods:
                anchor = "rms torch.nn.RMSNorm" if name.startswith("rms") else \
                    "layer torch.nn.LayerNorm"
                fwd, fb = ms[(name, "fwd")], ms[(name, "fb")]
                fwd_gbs, fb_gbs = 2 * nbytes / fwd / 1e6, 5 * nbytes / fb / 1e6
                rows.append({"shape": f"{N}x{D}", "dtype": dname, "impl": name,
                             "fwd ms": fwd, "fwd GB/s": fwd_gbs, "fwd of copy": fwd_gbs / copy_gbs,
                             "fwd+bwd ms": fb, "fwd+bwd GB/s": fb_gbs,
                             "fwd+bwd of copy": fb_gbs / copy_gbs,
                             "ratio": fb / ms[(anchor, "fb")]})
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", help="write the rows (and the setup) to this JSON file")
    p.add_argument("--quick", action="store_true", help="the small RNN shape only, 5 rounds")
    p.add_argument("--repeat", type=int, default=None)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--cells", nargs="+", default=["lstm", "gru"], choices=["lstm", "gru"])
    p.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=list(DTYPES))
    p.add_argument("--skip", nargs="*", default=[], choices=["rnn", "norms"])
    p.add_argument("--smoke", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    global RNN_SHAPES, NORM_SHAPES, DEVICE
    if args.smoke:  # this script's own check without a GPU: interpreted kernels, toy sizes
        os.environ["TRITON_INTERPRET"] = "1"
        K._INTERPRET_CPU = True
        DEVICE, RNN_SHAPES, NORM_SHAPES = "cpu", ((3, 2, 4, 8),), ((8, 32),)
    elif not torch.cuda.is_available():
        print("gpu_bench: no CUDA device here; this benchmark times the CUDA kernels only.",
              file=sys.stderr)
        return 2
    if not K.available():
        print("gpu_bench: triton is not installed (pip install 'layernorm[gpu]').",
              file=sys.stderr)
        return 2
    import triton
    repeat = args.repeat or (5 if args.quick else 7)
    setup = {"device": torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu (interpreter)",
             "torch": torch.__version__,
             "triton": triton.__version__, "repeat": repeat, "warmup": args.warmup}
    print(f"# {setup}")
    result = {"setup": setup}
    if "rnn" not in args.skip:
        shapes = RNN_SHAPES[:1] if args.quick else RNN_SHAPES
        rows = bench_rnn(shapes, args.dtypes, args.cells, repeat, args.warmup)
        result["rnn"] = rows
        print("LN-LSTM / LN-GRU: ratio = time / cuDNN's (no LN), vs torch-ops = torch-ops loop "
              "time / this one (fwd+bwd), gpu busy = kernel time / wall time of one training "
              "step (profiler)")
        print(format_table(rows, ["cell", "shape", "dtype", "impl", "fwd ms", "fwd ratio",
                                  "fwd+bwd ms", "ratio", "vs torch-ops", "peak MB",
                                  "gpu busy"]))
    if "norms" not in args.skip:
        rows = bench_norms(NORM_SHAPES, args.dtypes, repeat * 2, args.warmup)
        result["norms"] = rows
        print("Norms: GB/s of the bytes moved, of copy = fraction of the d2d copy bandwidth, "
              "ratio = fwd+bwd time / torch.nn's")
        print(format_table(rows, ["shape", "dtype", "impl", "fwd ms", "fwd GB/s", "fwd of copy",
                                  "fwd+bwd ms", "fwd+bwd GB/s", "fwd+bwd of copy", "ratio"]))
    if args.json:
        from layernorm_paper._io import atomic_write_json
        atomic_write_json(args.json, result)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

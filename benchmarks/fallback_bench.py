"""The cost of the LN-LSTM / LN-GRU where the C kernels do not run (docs/rnnfast.md, "Where the
C kernels do not run"): one forward + backward (of ``out.sum()``, parameters' grads set to None
first) of ``layernorm.LSTM`` / ``GRU(I, H, norm="layer")`` on a (T, B, I) input, timed against
``torch.nn.LSTM`` / ``GRU`` of the same shape and dtype in the same process (interleaved rounds,
medians; one thread; process time by default):

    float32  torch.nn module | ours, C kernels | ours, ``layernorm.rnn.fused.USE_NATIVE = False``
    float64  torch.nn module | ours (float64 never runs the C kernels)

    python benchmarks/fallback_bench.py [--src SRC_DIR] [--shapes 100x32x128x256 ...]
                                        [--rounds 5] [--cells LSTM GRU] [--clock process|wall]

``--src`` (default: this checkout's src) is put first on the path, so two checkouts can be timed
in alternating processes; the same flag toggles the C kernels in both."""
import argparse
import statistics
import sys
import time
from pathlib import Path

p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
p.add_argument("--src", default=str(Path(__file__).resolve().parents[1] / "src"))
p.add_argument("--shapes", nargs="+", default=["100x32x128x256", "100x32x512x512"])
p.add_argument("--rounds", type=int, default=5)
p.add_argument("--cells", nargs="+", default=["LSTM", "GRU"], choices=["LSTM", "GRU"])
p.add_argument("--dtypes", nargs="+", default=["float32", "float64"],
               choices=["float32", "float64"])
p.add_argument("--clock", choices=["process", "wall"], default="process")
args = p.parse_args()
sys.path.insert(0, args.src)
import torch  # noqa: E402

torch.set_num_threads(1)
import layernorm  # noqa: E402
from layernorm.rnn import fused  # noqa: E402

clock = time.process_time if args.clock == "process" else time.perf_counter


def step(m, x, native):
    fused.USE_NATIVE = native
    for q in m.parameters():
        q.grad = None
    t = clock()
    m(x)[0].sum().backward()
    return clock() - t


cases = []     # (shape, cell, dtype, {impl: (module, native)}, x)
for shape in args.shapes:
    T, B, I, H = (int(v) for v in shape.split("x"))
    for dtype in args.dtypes:
        dt = getattr(torch, dtype)
        for cell in args.cells:
            torch.manual_seed(0)
            ours = getattr(layernorm, cell)(I, H, norm="layer").to(dt)
            impls = {f"torch.nn.{cell}": (getattr(torch.nn, cell)(I, H).to(dt), True)}
            if dtype == "float32":
                impls["ours, C kernels"] = (ours, True)
                impls["ours, USE_NATIVE=False"] = (ours, False)
            else:
                impls["ours, float64 (no C kernels)"] = (ours, True)
            cases.append((shape, cell, dtype, impls, torch.randn(T, B, I, dtype=dt)))
native0 = fused.USE_NATIVE
print(f"layernorm from {Path(layernorm.__file__).parents[1]}; torch {torch.__version__}, "
      f"1 thread, {args.clock} time, median of {args.rounds} interleaved rounds after 1 warm-up; "
      f"C kernels available: {native0}")
times = {}
for r in range(args.rounds + 1):
    for shape, cell, dtype, impls, x in cases:
        names = list(impls) if r % 2 else list(impls)[::-1]
        for name in names:
            m, native = impls[name]
            s = step(m, x, native and native0)
            if r:
                times.setdefault((shape, cell, dtype, name), []).append(s)
fused.USE_NATIVE = native0
for shape, cell, dtype, impls, x in cases:
    anchor = statistics.median(times[(shape, cell, dtype, f"torch.nn.{cell}")])
    c_path = times.get((shape, cell, dtype, "ours, C kernels"))
    for name in impls:
        ms = statistics.median(times[(shape, cell, dtype, name)])
        extra = f", / C kernels {ms / statistics.median(c_path):.2f}" if c_path else ""
        print(f"{shape} {cell} {dtype} {name}: {ms * 1e3:.1f} ms, / torch.nn {ms / anchor:.2f}"
              f"{extra}")

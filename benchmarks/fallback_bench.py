"""The cost of the LN-LSTM / LN-GRU where the C kernels do not run (docs/rnnfast.md, "Where the
C kernels do not run"): one forward + backward of ``layernorm.LSTM`` / ``GRU(64, 128,
norm="layer")`` at (T, B) = (50, 32) in float64, and in float32 too under ``LAYERNORM_NATIVE=0``,
as a ratio to ``torch.nn.LSTM`` / ``GRU`` of the same shape and dtype timed in the same process
(interleaved rounds, medians; one thread, wall clock).

    LAYERNORM_NATIVE=0 python benchmarks/fallback_bench.py [SRC_DIR] [ROUNDS]

SRC_DIR (default: this checkout's src) is put first on the path, so two checkouts can be timed
in alternating processes."""
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] else str(Path(__file__).parents[1] / "src"))
import torch  # noqa: E402
torch.set_num_threads(1)
import layernorm  # noqa: E402
T, B, I, H = 50, 32, 64, 128
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
cases = []
for dtype in (torch.float64, torch.float32):
    if dtype == torch.float32 and os.environ.get("LAYERNORM_NATIVE") != "0":
        continue
    for cls in ("LSTM", "GRU"):
        torch.manual_seed(0)
        ours = getattr(layernorm, cls)(I, H, norm="layer").to(dtype)
        ref = getattr(torch.nn, cls)(I, H).to(dtype)
        x = torch.randn(T, B, I, dtype=dtype)
        cases.append((f"{cls} {str(dtype)[6:]}", ours, ref, x))


def step(m, x):
    t = time.perf_counter()
    m(x)[0].sum().backward()
    return time.perf_counter() - t



res = {c[0]: ([], []) for c in cases}
for name, ours, ref, x in cases:
    step(ours, x)
    step(ref, x)
for r in range(rounds):
    for name, ours, ref, x in cases:
        res[name][0].append(step(ours, x))
        res[name][1].append(step(ref, x))
for name, (a, b) in res.items():
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"{name}: ours {ma*1e3:.1f} ms, torch.nn {mb*1e3:.1f} ms, ratio {ma/mb:.2f}")

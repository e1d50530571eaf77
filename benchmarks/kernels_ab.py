"""Two builds of the LN-LSTM / LN-GRU C kernels (``ops/_rnn_steps*.c``) in one process: A from a
git revision, B from this checkout, both compiled with the library's flags and loaded with
ctypes, so that every round times A, B and torch's module one after the other (rotating the
order) under the same load. Two tables (docs/rnnfast.md, "The rows' memory traffic"):

    modules: layernorm.LSTM / GRU(I, H, norm="layer") with kernels A and with kernels B, against
             torch.nn.LSTM / GRU: forward under no_grad (fwd) and forward + backward of out.sum()
             (fwd+bwd), medians of the rounds, ratios to torch's module
    kernels: the sequence kernels alone (the forward that saves for the backward, then the
             backward: ``_forward_native`` / ``_backward_native`` of ``ops.lstm`` / ``ops.gru``)
             at T x B x H, and the median over rounds of B's time / A's; the two builds'
             gradients are compared

    python benchmarks/kernels_ab.py [--rev HEAD] [--threads 1] [--rounds 25]
                                    [--shapes 200x8x64x128 50x16x64x128 100x32x128x256]
                                    [--cells lstm gru] [--clock wall|process]

Process time (``--clock process``) counts this process's CPU time: with one thread it leaves out
the time another job on the same core takes; with several it adds the threads' times."""
import argparse
import ctypes
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
p.add_argument("--rev", default="HEAD", help="git revision of kernels A (default HEAD)")
p.add_argument("--threads", type=int, default=1)
p.add_argument("--rounds", type=int, default=25)
p.add_argument("--shapes", nargs="+", default=["200x8x64x128", "50x16x64x128", "100x32x128x256"])
p.add_argument("--cells", nargs="+", default=["lstm", "gru"], choices=["lstm", "gru"])
p.add_argument("--clock", choices=["wall", "process"], default="wall")
args = p.parse_args()
sys.path.insert(0, str(ROOT / "src"))

import torch  # noqa: E402

import layernorm  # noqa: E402
from layernorm import _native_build  # noqa: E402
from layernorm.ops import gru as ops_gru, lstm as ops_lstm, native  # noqa: E402

OPS = Path("src/layernorm/ops")
clock = time.perf_counter if args.clock == "wall" else time.process_time


def build(src: Path, out: Path) -> ctypes.CDLL:
    cc = (_native_build.compiler() or "cc").split()
    subprocess.run([*cc, *_native_build.compile_flags(), "-fopenmp", "-o", str(out),
                    str(src / "_rnn_steps.c")], check=True)
    lib = ctypes.CDLL(str(out))
    native._declare(lib)
    return lib


def use(lib) -> None:
    native._LIBRARY.lib, native._LIBRARY.tried = lib, True


def rounds(fns) -> list[float]:
    """Medians of each fn's times over the rounds, the order rotated each round."""
    for _ in range(3):
        for fn in fns:
            fn()
    times = [[] for _ in fns]
    for i in range(args.rounds):
        for k in [(i + j) % len(fns) for j in range(len(fns))]:
            t = clock()
            fns[k]()
            times[k].append(clock() - t)
    return times


def modules(cell, libs, T, B, I, H) -> str:
    ours = (layernorm.LSTM if cell == "lstm" else layernorm.GRU)(I, H, norm="layer")
    ref = (torch.nn.LSTM if cell == "lstm" else torch.nn.GRU)(I, H)
    x = torch.randn(T, B, I, requires_grad=True)

    def fwd(m):
        with torch.no_grad():
            m(x)

    def fwd_bwd(m):
        m(x)[0].sum().backward()
    line = ""
    for name, step in (("fwd", fwd), ("fwd+bwd", fwd_bwd)):
        runs = [lambda lib=lib: (use(lib), step(ours)) for lib in libs] + [lambda: step(ref)]
        a, b, t = (statistics.median(v) for v in rounds(runs))
        line += (f"  {name}: A {a * 1e3:.2f} B {b * 1e3:.2f} torch {t * 1e3:.2f} ms, "
                 f"/ torch A {a / t:.2f} B {b / t:.2f}")
    return line


def kernels(cell, libs, T, B, H) -> str:
    G = (4 if cell == "lstm" else 3) * H
    xw, go = torch.randn(T, B, G), torch.randn(T, B, H)
    h0, c0 = torch.randn(B, H), torch.randn(B, H)
    w, zero = torch.randn(G, H) / H ** 0.5, torch.zeros(B, H)
    gx, bx = torch.rand(G) + 0.5, torch.randn(G)
    if cell == "lstm":
        gh, bh, gc, bc = torch.rand(G) + 0.5, torch.randn(G), torch.rand(H) + 0.5, torch.randn(H)
        fwd = lambda lib: ops_lstm._forward_native(  # noqa: E731
            lib, xw, h0, c0, w, gh, bh, gc, bc, gx, bx, None, None, None, None, 1e-5, True)
        bwd = lambda lib, r: ops_lstm._backward_native(  # noqa: E731
            lib, go, zero, zero, xw, h0, w, gh, gc, gx, r[0], *r[3], None)
    else:
        gh, bh = torch.rand(2 * H) + 0.5, torch.randn(2 * H)
        gu, bu = torch.rand(H) + 0.5, torch.randn(H)
        fwd = lambda lib: ops_gru._forward_native(  # noqa: E731
            lib, xw, h0, w, gh, bh, gu, bu, gx, bx, None, None, None, 1e-5, True)
        bwd = lambda lib, r: ops_gru._backward_native(  # noqa: E731
            lib, go, zero, xw, h0, w, gh, bh, gu, bu, gx, bx, r[0], *r[2], None)
    saved = [fwd(lib) for lib in libs]
    grads = [bwd(lib, r) for lib, r in zip(libs, saved)]
    diff = max(float((a - b).abs().max() / b.abs().max().clamp(min=1e-30))
               for a, b in zip(*grads))
    tf = rounds([lambda lib=lib: fwd(lib) for lib in libs])
    tb = rounds([lambda lib=lib, r=r: bwd(lib, r) for lib, r in zip(libs, saved)])
    ratio = [statistics.median(b / a for a, b in zip(*t)) for t in (tf, tb)]
    return (f"  forward (save) A {statistics.median(tf[0]) * 1e3:.3f} ms, B / A {ratio[0]:.3f}; "
            f"backward A {statistics.median(tb[0]) * 1e3:.3f} ms, B / A {ratio[1]:.3f}; "
            f"gradients' max |A - B| / max |A| {diff:.1e}")


torch.set_num_threads(args.threads)
torch.manual_seed(0)
with tempfile.TemporaryDirectory() as tmp:
    a_src = Path(tmp) / "a"
    a_src.mkdir()
    listed = subprocess.run(["git", "ls-tree", "--name-only", f"{args.rev}:{OPS}"], cwd=ROOT,
                            check=True, capture_output=True, text=True).stdout.split()
    for name in listed:
        if name.startswith("_rnn_steps") and name.endswith(".c"):
            (a_src / name).write_bytes(subprocess.run(
                ["git", "show", f"{args.rev}:{OPS / name}"], cwd=ROOT, check=True,
                capture_output=True).stdout)
    libs = [build(a_src, Path(tmp) / "a.so"), build(ROOT / OPS, Path(tmp) / "b.so")]
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    print(f"A: {args.rev}, B: this checkout; {args.threads} thread(s), {args.clock} clock, "
          f"{args.rounds} rounds, load average {load}")
    for cell in args.cells:
        for shape in args.shapes:
            T, B, I, H = map(int, shape.split("x"))
            print(f"{cell} {shape} modules:{modules(cell, libs, T, B, I, H)}", flush=True)
            print(f"{cell} {shape} kernels:{kernels(cell, libs, T, B, H)}", flush=True)

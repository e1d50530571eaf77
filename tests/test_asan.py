"""The C kernels under AddressSanitizer: every exported entry point of ``ops/_rnn_steps.c`` and
``_rms_norm.c`` runs in a child process whose kernels are built with ``-fsanitize=address`` (the
compiler command ``$CC`` may carry flags; the cache is keyed on it, so the build is a separate
library in a temporary cache) and whose Python has ASan's runtime preloaded. Any out-of-bounds
read or write, use after free or double free in a kernel is an ASan report, and fails the test.

The child runs the library's own modules (LN-LSTM / LN-GRU over padded and packed batches, one
and two threads, the regularizers' masks, BN-LSTM / BN-GRU, the cells' one step, RMSNorm in
float32 and float64), records which exported functions were called, and checks the list against
the library's symbol table. It ends with a deliberate one-element overflow of the RMSNorm
kernel, which ASan must report: the harness is shown to catch what it looks for.

    python tests/test_asan.py --exercise      # the child's work, normally started by the test
"""
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

CANARY = "asan canary: a deliberate overflow follows"
OPTIONAL = ("batch_sizes", "h_mask", "zone_h", "zone_c",    # lengths and the regularizers' masks
            "x",                                           # inference: the input GEMM inside
            "wpb", "wtpb")                                 # ... in bfloat16 (AVX512-BF16)
FLAGS = "-fsanitize=address -fno-omit-frame-pointer"


def _libasan() -> str | None:
    gcc = shutil.which("gcc")
    if gcc is None:
        return None
    try:
        out = subprocess.run([gcc, "-print-file-name=libasan.so"], capture_output=True,
                             text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out if os.path.isabs(out) and os.path.exists(out) else None


def _exported(lib_path: Path) -> set[str]:
    """The functions a shared library exports (``nm -D --defined-only``)."""
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib_path)], capture_output=True,
                         text=True, check=True).stdout
    return {parts[2] for parts in (line.split() for line in out.splitlines())
            if len(parts) == 3 and parts[1] == "T" and not parts[2].startswith("_")}


@pytest.mark.slow
def test_every_c_kernel_entry_point_is_clean_under_address_sanitizer(tmp_path):
    libasan = _libasan()
    if libasan is None:
        pytest.skip("AddressSanitizer needs gcc and its libasan (gcc -print-file-name=libasan.so "
                    "names no file here)")
    if shutil.which("nm") is None:
        pytest.skip("nm (binutils) is needed to list the kernels' exported functions")
    env = {**os.environ, "CC": f"{shutil.which('gcc')} {FLAGS}",
           "LAYERNORM_CACHE": str(tmp_path / "cache"), "LAYERNORM_NATIVE": "1",
           "LAYERNORM_COMPILE_TIMEOUT": "600",     # the instrumented build is slow on a busy machine
           "LD_PRELOAD": libasan, "PYTHONWARNINGS": "error",
           "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0:exitcode=99"}
    env.pop("TRITON_INTERPRET", None)
    child = subprocess.run([sys.executable, __file__, "--exercise"], env=env, capture_output=True,
                           text=True, timeout=300, cwd=Path(__file__).parent)
    err = child.stderr
    before = err.split(CANARY, 1)[0]
    assert "AddressSanitizer" not in before, f"ASan reported a fault in a kernel:\n{before}"
    assert CANARY in err, f"the child did not reach the canary (exit {child.returncode}):\n{err}"
    after = err.split(CANARY, 1)[1]

    # The build was instrumented, and the harness sees a fault: the canary's overflow reported.
    libs = sorted((tmp_path / "cache").glob("*.so"))
    assert {p.name.split("-")[0] for p in libs} == {"rnn_steps", "rms_norm"}, libs
    for lib in libs:
        assert b"__asan_report" in lib.read_bytes(), f"{lib} is not built with ASan"
    assert child.returncode == 99, (child.returncode, after)
    assert re.search(r"ERROR: AddressSanitizer: heap-buffer-overflow", after), after
    assert "rms_forward_f32" in after, after

    # Every exported function ran (struct_size / struct_last / panel_width: when loaded), the
    # sequence kernels with lengths (packed) and with the regularizers' masks.
    record = json.loads(child.stdout.strip().splitlines()[-1])
    called = record["called"]
    for kernel in ("lstm_forward_seq", "lstm_backward_seq", "gru_forward_seq",
                   "gru_backward_seq"):
        fields = ["batch_sizes", "h_mask", "zone_h"] + (["zone_c"] if "lstm" in kernel else [])
        missing = [f for f in fields if f"{kernel} {f}" not in record["given"]]
        assert not missing, (kernel, missing, record["given"])
    for kernel in ("bn_lstm_forward_seq", "bn_gru_forward_seq"):
        assert f"{kernel} batch_sizes" in record["given"], record["given"]
    for kernel in ("lstm_forward_seq", "gru_forward_seq"):  # ln_lstm_inference / ln_gru_inference
        assert f"{kernel} x" in record["given"], record["given"]
        assert f"{kernel} wpb" in record["given"] or not record["bf16_dot"], record["given"]
    for kernel in ("lstm_backward_seq", "gru_backward_seq"):  # bfloat16 training
        assert f"{kernel} wtpb" in record["given"] or not record["bf16_dot"], record["given"]
    exported = set().union(*(_exported(lib) for lib in libs))
    at_load = {n for n in exported if n.endswith(("_struct_size", "_struct_last"))
               or n == "panel_width"}
    assert exported - at_load - set(called) == set(), sorted(exported - at_load - set(called))
    assert set(called) <= exported, sorted(set(called) - exported)


# ----------------------------------------------------------------------------- the child's work
def _exercise() -> None:
    import torch
    from torch.nn.utils.rnn import pack_padded_sequence

    import layernorm as L
    from layernorm import _rms_native
    from layernorm.ops import inference, native

    class Recorder:
        """The loaded library, recording the names of the functions called through it."""

        def __init__(self, lib, called):
            self._lib, self._called = lib, called

        def __getattr__(self, name):
            f = getattr(self._lib, name)
            self._called.add(name)
            return f

    called: set[str] = set()
    for module in (native, _rms_native):
        lib = module.load()
        assert lib is not None, f"{module.__name__}: the C kernels did not load"
        module._LIBRARY.lib = Recorder(lib, called)
    given: set[str] = set()            # "kernel field": the optional inputs the kernels received
    call = native.call

    def recording_call(lib, kernel, cls, who, **fields):
        given.update(f"{kernel} {k}" for k in OPTIONAL if fields.get(k) is not None)
        return call(lib, kernel, cls, who, **fields)
    native.call = recording_call

    torch.manual_seed(0)
    start = time.perf_counter()
    I = 11
    for threads in (1, 2):             # 1: the input term through gemm_packed; 2: OpenMP rows
        torch.set_num_threads(threads)
        # gemm_packed takes 4H rows in whole panels (H = 32); H = 37 is not a multiple of the
        # kernels' vector or panel widths
        H = 32 if threads == 1 else 37
        for mode in ("LSTM", "GRU"):
            for norm in ("layer", "batch"):
                for regs in ({}, dict(recurrent_dropout=0.3, zoneout=0.2, dropconnect=0.25)):
                    if norm == "batch" and regs:
                        continue
                    m = getattr(L, mode)(I, H, num_layers=2, bidirectional=norm == "layer",
                                         norm=norm, **regs)
                    m.train()
                    # padded: all rows of full length; packed: unsorted lengths with a long tail
                    x = torch.randn(13, 9, I, requires_grad=True)
                    out, _ = m(x)
                    (out.square().sum() + out.sum()).backward()
                    lengths = torch.tensor([13, 1, 7, 13, 2, 12, 9, 4, 11])
                    packed = pack_padded_sequence(x, lengths, enforce_sorted=False)
                    out, _ = m(packed)
                    out.data.square().sum().backward()
                    m.eval()
                    with torch.no_grad():
                        m(packed)
        # training at 3 rows on 2 threads: the sequence kernels split the products' columns
        # (forward_seq_cols with the input term given, backward_seq_cols), in float32 and, where
        # the CPU has the dot products, in bfloat16
        for mode in ("LSTM", "GRU") if threads == 2 else ():
            for regs in ({}, dict(zoneout=0.2), dict(recurrent_dropout=0.3)):
                for dtype in (torch.float32, torch.bfloat16) if native.load().bf16_dot() \
                        else (torch.float32,):
                    m = getattr(L, mode)(I, H, norm="layer", **regs).to(dtype).train()
                    x3 = torch.randn(13, 3, I, dtype=dtype, requires_grad=True)
                    out, _ = m(pack_padded_sequence(x3, torch.tensor([4, 13, 9]),
                                                    enforce_sorted=False))
                    out.data.float().square().sum().backward()
        # inference with the input GEMM inside the time loop, padded and packed (sorted lengths)
        # (18 rows on 2 threads: each thread its rows; 3 rows: the threads split W_hh's columns,
        # each its own rows' W_x x_t; 1 row: the threads split both products' columns)
        x = torch.randn(13, 18, I)
        sizes = 2 * (torch.tensor([13, 13, 12, 11, 9, 7, 4, 2, 1]).unsqueeze(0)
                     > torch.arange(13).unsqueeze(1)).sum(1)
        for G, infer in ((4, inference.ln_lstm_inference), (3, inference.ln_gru_inference)):
            w_ih, w_hh = torch.randn(G * H, I), torch.randn(G * H, H)
            g, b = torch.ones(G * H), torch.zeros(G * H)
            states = [torch.zeros(18, H)] * (2 if G == 4 else 1)
            n = 4 * H if G == 4 else 2 * H
            for batch_sizes in (None, sizes):
                infer(x, *states, w_ih, w_hh, g, b, g[:n], b[:n], g[:H], b[:H],
                      batch_sizes=batch_sizes)
                # 3 rows and 1 row on 2 threads: the threads split the columns (forward_seq_cols)
                for rows in (3, 1):
                    infer(x[:, :rows].contiguous(), *(s[:rows] for s in states), w_ih, w_hh, g, b,
                          g[:n], b[:n], g[:H], b[:H],
                          batch_sizes=None if batch_sizes is None else batch_sizes.clamp(max=rows))
                if native.load().bf16_dot():  # the products in bfloat16: H, I odd
                    half = [t.bfloat16() for t in (x, *states, w_ih, w_hh, g, b)]
                    infer(*half, g[:n].bfloat16(), b[:n].bfloat16(), g[:H].bfloat16(),
                          b[:H].bfloat16(), batch_sizes=batch_sizes)
            if native.load().bf16_dot():  # bfloat16 training: both recurrent products in bf16
                m = getattr(L, "LSTM" if G == 4 else "GRU")(I, H, norm="layer",
                                                           recurrent_dropout=0.3, zoneout=0.2)
                m = m.bfloat16().train()
                out, _ = m(pack_padded_sequence(x.bfloat16(), sizes.new_tensor(
                    [13, 13, 13, 13, 12, 12, 11, 11, 9, 9, 7, 7, 4, 4, 2, 2, 1, 1]),
                    enforce_sorted=True))
                out.data.float().square().sum().backward()
        from layernorm.ops.gemm import _panels_bf16
        width = native.load().panel_width()
        for M, K, N in ((1, 7, 5), (13, 37, 3 * width + 1)):  # -4 without AVX512-BF16
            a, wpb = torch.randn(M, K), _panels_bf16(torch.randn(N, K), width)
            y = torch.empty(M, wpb.shape[0] * width)
            native.load().gemm_packed_bf16(M, K, a.data_ptr(), wpb.data_ptr(), wpb.shape[0],
                                           y.data_ptr())
        for mode in ("LSTMCell", "GRUCell"):
            for regs in ({}, dict(zoneout=0.2, recurrent_dropout=0.3, dropconnect=0.25)):
                cell = getattr(L, mode)(I, H, norm="layer", **regs).train()
                h, x = None, torch.randn(3, 9, I, requires_grad=True)
                loss = 0
                for t in range(3):
                    h = cell(x[t], h)
                    loss = loss + (h[0] if isinstance(h, tuple) else h).square().sum()
                loss.backward()
                one = cell(torch.randn(1, I, requires_grad=True))   # batch 1: one C call
                (one[0] if isinstance(one, tuple) else one).sum().backward()
                with torch.no_grad():               # batch 1 without autograd
                    cell.eval()(torch.randn(1, I))
            # batch 1 with weights above the products' split (two MATVEC_SHAREs), 3H not a multiple
            # of the four rows a thread takes at a time
            big = getattr(L, mode)(37, 130, norm="layer")
            with torch.no_grad():
                big(torch.randn(1, 37))
            big(torch.randn(1, 37, requires_grad=True))[0].sum().backward()
        # matvec_rows, which the batch-1 step calls inside C, through its own entry point too
        a, w, y = torch.randn(2, 37), torch.randn(18, 37), torch.empty(2, 18)
        native.load().matvec_rows(2, 37, a.data_ptr(), w.data_ptr(), 18, y.data_ptr())
        for dtype in (torch.float32, torch.float64):      # above the small-input cutoff
            norm = L.RMSNorm(1003, dtype=dtype)
            x = torch.randn(_rms_native.SMALL // 1003 + 3, 1003, dtype=dtype, requires_grad=True)
            norm(x).square().sum().backward()
    print(f"work: {time.perf_counter() - start:.1f} s", file=sys.stderr)
    print(json.dumps({"called": sorted(called), "given": sorted(given),
                      "bf16_dot": native.load().bf16_dot()}), flush=True)

    # The canary: the forward kernel told that a 1003-value buffer holds one more value.
    print(CANARY, file=sys.stderr, flush=True)
    x, w = torch.randn(1003), torch.ones(1004)
    y, rstd = torch.empty(1004), torch.empty(1)
    forward, _ = _rms_native._kernels(torch.float32)
    forward(1, 1004, 1e-5, 1, x.data_ptr(), w.data_ptr(), y.data_ptr(), rstd.data_ptr())
    print("the canary's overflow was not reported", file=sys.stderr, flush=True)


if __name__ == "__main__" and sys.argv[1:] == ["--exercise"]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    _exercise()

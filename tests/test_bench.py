"""``layernorm bench``: the harness's interleaving, the rows and ratio columns of every table (tiny
shapes, one round: structure only, never a speed), the TorchScript baseline's equations, and the
command."""
from __future__ import annotations

import json
import math
import re
import runpy
import sys

import pytest
import torch

from layernorm_paper.bench import compare, ratios
from layernorm_paper.bench.baseline import ScriptLNLSTM
from layernorm_paper.bench.cells import bench_bn_lstm, bench_cells
from layernorm_paper.bench.decode import _OneStep, bench_decode
from layernorm_paper.bench.harness import cpu_features
from layernorm_paper.bench.rnn import bench_rnn, gemm_steps
from layernorm_paper.cli import main
from tests.reference import ref_recurrent

TINY = ["--shapes", "3x2x4x8", "--repeat", "1", "--warmup", "0", "--clock", "process"]


def _finite(*values) -> bool:
    return all(isinstance(v, float) and math.isfinite(v) and v > 0 for v in values)


def test_compare_interleaves_in_alternating_order_and_takes_medians():
    calls, now = [], [0.0]

    def fn(name, cost):
        def run():
            calls.append(name)
            now[0] += cost
        return run
    ms = compare({"a": fn("a", 1.0), "b": fn("b", 3.0)}, warmup=1, repeat=3,
                 clock=lambda: now[0] / 1e3)
    assert calls == ["a", "b", "a", "b", "b", "a", "a", "b"]   # warm-up, then a b / b a / a b
    assert ms == {"a": 1.0, "b": 3.0}
    assert ratios(ms, "a") == {"a": 1.0, "b": 3.0}
    with pytest.raises(ValueError, match="repeat >= 1"):
        compare({"a": fn("a", 1.0)}, repeat=0)


def test_bench_rnn_cli_smoke(tmp_path, capsys):
    """`layernorm bench rnn` on a tiny shape: every table, every implementation measured, ratio
    columns finite, torch's rows at 1.0, the JSON holds what was printed."""
    out = tmp_path / "rnn.json"
    assert main(["bench", "rnn", *TINY, "--layers", "1", "2", "--no-extras",
                 "--cell-batches", "1", "2", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert {r["table"] for r in rows} == {"modules", "cells", "bn", "packed", "inference",
                                          "training", "decode"}
    modules = [r for r in rows if r["table"] == "modules"]
    impls = {(r["cell"], r["layers"], r["impl"]) for r in modules}
    for layers in (1, 2):
        assert {("lstm", layers, "torch.nn.LSTM"), ("lstm", layers, "layernorm.LSTM"),
                ("lstm", layers, "TorchScript LN-LSTM"), ("gru", layers, "torch.nn.GRU"),
                ("gru", layers, "layernorm.GRU")} <= impls
    assert ("lstm", 1, "layernorm loop") in impls
    for r in modules:
        assert _finite(r["fwd ms"], r["fwd+bwd ms"], r["peak MB"], r["ratio"], r["fwd ratio"],
                       r["mem ratio"], r["fwd of mm"], r["of mm"], r["GFLOP/s"], r["mm GFLOP/s"])
        # of mm = mm time / the row's time, GFLOP/s = FLOPs / the row's time: one ratio
        assert r["of mm"] == pytest.approx(r["GFLOP/s"] / r["mm GFLOP/s"])
        if r["impl"] == "torch.nn." + r["cell"].upper():
            assert r["ratio"] == r["fwd ratio"] == r["mem ratio"] == 1.0

    cells = {(r["cell"], r["B"], r["impl"]): r for r in rows if r["table"] == "cells"}
    assert set(cells) == {(c, B, f"{lib}.{name}") for c, name in (("lstm", "LSTMCell"),
                                                                   ("gru", "GRUCell"))
                          for B in (1, 2) for lib in ("torch.nn", "layernorm")}
    for (cell, B, impl), r in cells.items():
        assert r["steps"] == 3 and (r["I"], r["H"]) == (4, 8)
        assert _finite(r["fwd ms"], r["fwd+bwd ms"], r["fwd ratio"], r["ratio"])
        if impl.startswith("torch.nn."):
            assert r["ratio"] == r["fwd ratio"] == 1.0

    bn = {r["impl"]: r for r in rows if r["table"] == "bn"}
    assert set(bn) == {"torch.nn.LSTM", "LN-LSTM (norm=layer)", "BN-LSTM (norm=batch)",
                       "BN-LSTM loop (use_fused=False)"}
    for r in bn.values():
        assert _finite(r["fwd ms"], r["fwd+bwd ms"], r["ratio"], r["ms/step"], r["vs LN-LSTM"])
        assert r["ms/step"] == pytest.approx(r["fwd+bwd ms"] / 3)
    assert bn["torch.nn.LSTM"]["ratio"] == bn["LN-LSTM (norm=layer)"]["vs LN-LSTM"] == 1.0

    packed = {(r["impl"], r["input"]): r for r in rows if r["table"] == "packed"}
    assert set(packed) == {(f"{lib}{m}{norm}", kind) for m in ("LSTM", "GRU")
                           for lib, norm, kind in (("torch.nn.", "", "padded"),
                                                   ("torch.nn.", "", "packed"),
                                                   ("layernorm.", ' norm="none"', "packed"),
                                                   ("layernorm.", ' norm="layer"', "packed"))}
    for r in packed.values():
        assert r["shape"] == "3x2x4x8" and _finite(r["fwd ms"], r["fwd+bwd ms"], r["ratio"])
    assert packed[("torch.nn.LSTM", "padded")]["ratio"] == 1.0
    assert packed[("torch.nn.GRU", "padded")]["ratio"] == 1.0
    for table, batches in (("inference", (1, 8, 32, 256)), ("training", (1, 4, 8, 16, 32))):
        by_batch = {(r["cell"], r["B"], r["impl"]): r for r in rows if r["table"] == table}
        assert set(by_batch) == {(c, B, f"{lib}.{c.upper()}") for c in ("lstm", "gru")
                                 for B in batches for lib in ("torch.nn", "layernorm")}
        for (cell, B, impl), r in by_batch.items():
            assert r["shape"] == f"3x{B}x4x8" and _finite(r["ms"], r["ratio"])
            if impl.startswith("torch.nn."):
                assert r["ratio"] == 1.0
    decode = {(r["cell"], r["impl"]): r for r in rows if r["table"] == "decode"}
    assert set(decode) == {(c, f"{lib}.{c.upper()}") for c in ("lstm", "gru")
                           for lib in ("torch.nn", "layernorm")}
    for (cell, impl), r in decode.items():
        assert (r["layers"], r["B"], r["steps"], r["I"], r["H"]) == (2, 1, 3, 4, 8)
        assert _finite(r["fwd ms"], r["fwd+bwd ms"], r["fwd ratio"], r["ratio"])
        if impl.startswith("torch.nn."):
            assert r["ratio"] == r["fwd ratio"] == 1.0

    printed = capsys.readouterr().out
    for words in ("fwd+bwd ms", "TorchScript LN-LSTM", "layernorm.GRUCell", "BN-LSTM (norm=batch)",
                  "ms/step", "vs LN-LSTM", "load average", "C kernels: ", "fwd of mm", "GFLOP/s",
                  "Decode: a 2-layer stack", "Training by batch"):
        assert words in printed, words
    head = printed.splitlines()[:2]  # the CPU's features, then the large GEMM's rate
    assert head[0].startswith("CPU: ") and "features: " in head[0] and "C kernels: " in head[0]
    assert head[1].startswith("one (2048, 2048) x (2048, 2048) product: torch.mm ")
    rates = [float(r) for r in re.findall(r"([\d.]+) GFLOP/s", head[1])]
    assert len(rates) == 2 and all(r > 0 for r in rates), head[1]
    assert "layernorm.ops.input_linear" in head[1]


def test_gemm_steps_counts_the_products_of_a_stack(monkeypatch):
    """``gemm_steps``: the products of a 2-layer bidirectional LSTM, counted call by call
    (forward: input term + T recurrent per direction; backward: T for dh, dW_hh, dW_ih, and the
    input's gradient above the first layer) against their FLOPs."""
    T, B, I, H, G = 3, 2, 5, 4, 16
    shapes = []
    real_mm = torch.mm

    def spy(a, b, out=None):
        shapes.append((a.shape[0], a.shape[1], b.shape[1]))
        return real_mm(a, b, out=out)
    fwd, fb, gflop_f, gflop_fb = gemm_steps(T, B, I, H, 2, True, 4)
    monkeypatch.setattr(torch, "mm", spy)
    fwd()
    assert sorted(shapes) == sorted([(T * B, I, G)] * 2 + [(T * B, 2 * H, G)] * 2
                                    + [(B, H, G)] * (4 * T))
    assert gflop_f * 1e9 == pytest.approx(sum(2 * m * k * n for m, k, n in shapes))
    shapes.clear()
    fb()
    assert len(shapes) == 4 * (1 + T) + 4 * (T + 2) + 2   # two upper directions: dx
    assert gflop_fb * 1e9 == pytest.approx(sum(2 * m * k * n for m, k, n in shapes))
    assert (G, T * B, I) in shapes and (T * B, G, 2 * H) in shapes and (T * B, G, I) not in shapes


def test_cpu_features_names_the_model_and_torchs_kernels(monkeypatch, tmp_path):
    import builtins
    line = cpu_features()
    assert "features: " in line and "torch's CPU kernels: " in line
    real_open = builtins.open
    info = tmp_path / "cpuinfo"
    info.write_text("model name\t: Test CPU 9000\nflags\t\t: fpu avx2 fma avx512f amx_tile "
                    "amx_bf16\n")
    monkeypatch.setattr(builtins, "open",
                        lambda p, *a, **k: real_open(info if p == "/proc/cpuinfo" else p, *a, **k))
    assert cpu_features().startswith("Test CPU 9000; features: avx2 fma avx512f amx_tile amx_bf16;")


def test_bench_rnn_compile_autocast_and_bf16_rows():
    """The torch.compile row (cold compile seconds, steady time vs the eager module), the
    autocast-bf16 rows (ratio against torch's module under autocast, or its bf16 module) and the
    bf16 module rows (ratio against torch's bf16 module)."""
    rows = bench_rnn(((3, 2, 4, 8, 1, False),), cells=("lstm",), repeat=1, warmup=0,
                     loop_on_first=False, progress=False, clock="process",
                     compile_backend="aot_eager")  # (inductor's C++ builds take long here)
    by_impl = {r["impl"]: r for r in rows}
    compiled = by_impl["layernorm.LSTM compiled"]
    assert compiled["compile s"] > 0 and compiled["vs eager"] > 0
    autocast = [r for r in rows if "autocast" in r["impl"]]
    assert len(autocast) == 2 and autocast[0]["impl"].startswith("torch.nn.LSTM")
    assert autocast[0]["ratio"] == 1.0 and autocast[1]["fwd+bwd ms"] > 0
    assert by_impl["torch.nn.LSTM bf16"]["ratio"] == 1.0
    ours = by_impl["layernorm.LSTM bf16"]
    assert _finite(ours["ratio"], ours["fwd ratio"], ours["peak MB"])


def test_cell_and_bn_tables_alone():
    rows = bench_cells(2, 3, 5, batches=(1,), cells=("gru",), repeat=1, warmup=0)
    assert [r["impl"] for r in rows] == ["torch.nn.GRUCell", "layernorm.GRUCell"]
    rows = bench_bn_lstm((2, 3, 4, 5), repeat=1, warmup=0)
    assert [r["impl"] for r in rows][0] == "torch.nn.LSTM" and len(rows) == 4
    assert rows[-1]["impl"] == "BN-LSTM loop (use_fused=False)"
    rows = bench_bn_lstm((2, 3, 4, 5), repeat=1, warmup=0, loop=False)
    assert len(rows) == 3


def test_the_decode_table_steps_a_stack_one_call_at_a_time():
    """The decode rows time what a decoder runs: the stack called with one step, its state
    carried, which ends in the state of the whole sequence in one call."""
    import layernorm
    rows = bench_decode(3, 4, 6, batches=(1, 2), cells=("lstm",), repeat=1, warmup=0)
    assert [(r["B"], r["impl"]) for r in rows] == [(1, "torch.nn.LSTM"), (1, "layernorm.LSTM"),
                                                   (2, "torch.nn.LSTM"), (2, "layernorm.LSTM")]
    assert all(r["layers"] == 2 and r["table"] == "decode" for r in rows)
    m = layernorm.GRU(4, 6, num_layers=2, norm="layer")
    x = torch.randn(5, 2, 4)
    step, state = _OneStep(m), None
    for t in range(5):
        state = step(x[t], state)
    torch.testing.assert_close(state, m(x)[1])


def test_the_torchscript_baseline_is_the_ln_lstm_of_the_reference():
    """The baseline times the same equations (paper section 3.1): a 2-layer bidirectional
    ScriptLNLSTM in float64 against ``ref_recurrent``, example by example."""
    T, B, I, H = 4, 2, 3, 5
    m = ScriptLNLSTM(I, H, num_layers=2, bidirectional=True).double()
    with torch.no_grad():
        for p in m.parameters():             # gains and biases away from 1 and 0
            p.add_(torch.randn_like(p) * 0.3)
    x = torch.randn(T, B, I, dtype=torch.float64)
    out = m(x)[0]
    layers = []
    for layer in range(2):
        dirs = []
        for d in range(2):
            c = m.layers[layer * 2 + d].cell
            dirs.append({"W_x": c.weight_ih, "W_h": c.weight_hh, "g_x": c.gain_ih,
                         "b_x": c.bias_ih, "g_h": c.gain_hh, "b_h": c.bias_hh, "g_c": c.gain_c,
                         "b_c": c.bias_c})
        layers.append(dirs)
    for b in range(B):
        ref = ref_recurrent("LSTM", x[:, b].detach(), [[{k: v.detach() for k, v in p.items()}
                                                       for p in dirs] for dirs in layers])[0]
        torch.testing.assert_close(out[:, b], ref, atol=1e-10, rtol=1e-10)


def test_python_dash_m_layernorm_bench(monkeypatch, capsys):
    """``python -m layernorm_paper.bench ...`` is ``layernorm bench ...``; a bad value: exit 2, one
    line."""
    def run(*argv):
        monkeypatch.setattr(sys, "argv", ["layernorm_paper.bench", *argv])
        with pytest.raises(SystemExit) as stop:
            runpy.run_module("layernorm_paper.bench", run_name="__main__", alter_sys=True)
        return stop.value.code
    assert run("norms", "--shapes", "8x4", "--norms", "layer", "--repeat", "1") == 0
    assert "layernorm.LayerNorm" in capsys.readouterr().out
    assert run("rnn", "--cell-batches", "0") == 2
    err = capsys.readouterr().err
    assert "expected a positive integer" in err and "Traceback" not in err and err.count("\n") == 1


def test_the_benchmarks_sit_above_the_library():
    """Nothing imports the benchmarks but the command line (which imports every command module),
    and they import no command of their own layer but the command line's entry point."""
    from tests.test_layers import import_graph
    graph = import_graph()
    bench = {m for m in graph if m == "layernorm_paper.bench" or m.startswith("layernorm_paper.bench.")}
    assert {"layernorm_paper.bench.harness", "layernorm_paper.bench.rnn", "layernorm_paper.bench.cells"} <= bench
    assert graph["layernorm_paper.cli"] & bench == {"layernorm_paper.bench"}
    for module, targets in graph.items():
        if module not in bench and module != "layernorm_paper.cli":
            assert not targets & bench, f"{module} imports the benchmarks: {targets & bench}"
    assert "layernorm_paper.bench.rnn" not in graph["layernorm.rnn"]
    assert graph["layernorm_paper.bench.harness"] == set(), "the harness needs nothing of the package"

"""The Triton kernels compile for an H100/H200 (sm_90) on any machine, GPU or not.

The interpreter (tests/test_triton.py) runs the kernels' Python, not triton's compiler: this
compiles each kernel, with every feature switched on, to a cubin with the ptxas bundled in the
triton wheel. In a subprocess: once a process has imported triton in interpreter mode it cannot
compile. Skipped without triton or its CUDA backend.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("triton") is None
    or importlib.util.find_spec("triton.backends.nvidia") is None,
    reason="needs triton with its CUDA backend (pip install -e '.[test]')")

SCRIPT = r'''
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from layernorm.kernels import _norms, _rnn

SCALARS = {"t": "i32", "hg_slot": "i32", "c_in": "i32", "c_out": "i32", "B": "i32", "H": "i32",
           "eps": "fp32", "LEN": "*i32", "N": "i32", "n_rows": "i32", "rows_per_program": "i32"}
F32 = {"CS", "STATS", "DH", "DC", "ACC", "Mean", "Rstd", "DW", "DB"}


def compile_(fn, constexprs, num_warps):
    # bf16 activations; float32 statistics, cell states, gradient carries and accumulators
    sig = {n: "constexpr" if n in constexprs else SCALARS.get(n, "*fp32" if n in F32 else "*bf16")
           for n in fn.arg_names}
    k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=constexprs),
                       target=GPUTarget("cuda", 90, 32),
                       options={"num_warps": num_warps, "enable_fp_fusion": True})
    assert k.asm["cubin"], fn.__name__
    print("compiled", fn.__name__, constexprs)


block, warps = _rnn._block(1024)
zones = ({"HAS_ZH": True, "HAS_ZC": True}, {"HAS_ZH": True})  # LSTM's, GRU's zoneout
for fn, z in zip((_rnn._lstm_forward_step, _rnn._gru_forward_step), zones):
    compile_(fn, {"HAS_LEN": True, "HAS_XLN": True, "SAVE": True, **z, "BLOCK_H": block}, warps)
for fn, z in zip((_rnn._lstm_backward_step, _rnn._gru_backward_step), zones):
    compile_(fn, {"HAS_LEN": True, "HAS_XLN": True, "HAS_DHMM": True, **z, "BLOCK_H": block},
             warps)
for one in (True, False):
    compile_(_norms._norm_forward, {"CENTER": True, "HAS_W": True, "HAS_B": True, "BLOCK": 4096,
                                    "ONE_BLOCK": one}, 16)
    compile_(_norms._norm_backward, {"CENTER": True, "HAS_W": True, "BLOCK": 4096,
                                     "ONE_BLOCK": one}, 16)
'''


def test_kernels_compile_for_sm90():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(["src", env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, "-W", "error", "-c", SCRIPT], capture_output=True,
                       text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr[-4000:]
    assert r.stdout.count("compiled") == 8, r.stdout

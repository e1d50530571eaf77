"""What the C kernels of the recurrent cells (``_rnn_steps.c``) were built for on this machine: the
public view of their build for benchmarks and diagnostics (docs/rnnfast.md). Nothing here changes
which path a computation takes.

``describe()``: one line naming the vectors the kernels were compiled for (``-march=native``, or
AVX2 with ``LAYERNORM_NATIVE_ISA=avx2``) and whether their bfloat16 products run on the CPU's
bfloat16 dot products (AVX512-BF16), or why they are not used. ``build_seconds()``: the time
a first use takes to compile them (into a temporary directory, so the cache is left alone), or
None without a working C compiler.
"""
from __future__ import annotations

import tempfile
import time
import warnings
from pathlib import Path

from .. import _native_build
from . import native


_SIMD = {32: "AVX-512, 16-float vectors", 16: "AVX / AVX2, 8-float vectors",
         8: "128-bit vectors (SSE / NEON)"}


def simd_name(lib) -> str:
    """The vectors the loaded kernels' GEMM and loops were compiled for (from their panel width,
    two vectors) and the build (``LAYERNORM_NATIVE_ISA``)."""
    width = lib.panel_width()
    return (f"{_SIMD.get(width, f'{width // 2}-float vectors')} "
            f"(-march=native{'' if _native_build.isa() == 'native' else ' -mno-avx512f'})")


def describe() -> str:
    """"C kernels: <vectors> (<flags>), bf16 products on ...", or "C kernels: unavailable (torch
    ops)" where they cannot be built or loaded here (the loader's warning is not repeated)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lib = native.load()
    if lib is None:
        return "C kernels: unavailable (torch ops)"
    half = ("bf16 products on AVX512-BF16 dot products" if lib.bf16_dot()
            else "bf16 products in float32")
    return f"C kernels: {simd_name(lib)}, {half}"


def build_seconds() -> float | None:
    """Seconds to compile the C kernels from scratch, as on first use, or None when no C compiler
    is available or it fails (torch ops are used then)."""
    cc = native.compiler()
    if not cc:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        try:
            native._build(cc, Path(tmp) / "k.so")
        except Exception:  # noqa: BLE001 - no working compiler: torch ops are used
            return None
        return time.perf_counter() - t0


__all__ = ["describe", "build_seconds", "simd_name"]

"""The machine's arithmetic, for the report's environment: the CPU's vector features and the
BLAS / LAPACK build PyTorch uses. Float rounding depends on both (a different kernel can sum in
another order), so runs on another CPU act as new seeds: the report states them beside the
verdicts."""
from __future__ import annotations

import functools
import re
from pathlib import Path

# The flags that decide which kernels PyTorch and its BLAS pick (x86 /proc/cpuinfo names; the
# Arm ones as Linux reports them).
FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
         "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "asimd", "sve", "sve2")


def cpu_flags(cpuinfo: str | None = None) -> list[str]:
    """The subset ``FLAGS`` of the CPU's feature flags (the first processor's ``flags`` or
    ``Features`` line of /proc/cpuinfo); [] where it cannot be read."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            return []
    m = re.search(r"^(?:flags|Features)\s*:\s*(.*)$", cpuinfo, re.MULTILINE)
    have = set(m.group(1).split()) if m else set()
    return [f for f in FLAGS if f in have]


def blas_summary(config: str) -> str:
    """The BLAS / LAPACK lines of ``torch.__config__.show()``: BLAS_INFO, LAPACK_INFO, the MKL
    or OpenBLAS version line, and the CPU capability it reports."""
    out = []
    for key in ("BLAS_INFO", "LAPACK_INFO"):
        m = re.search(rf"{key}=([^,\s]+)", config)
        if m:
            out.append(f"{key}={m.group(1)}")
    for line in config.splitlines():
        t = line.strip(" -\t")
        if re.search(r"Math Kernel Library|OpenBLAS|BLIS|Accelerate|MKL-DNN|oneDNN", t):
            out.append(t)
    return "; ".join(out) or "not reported by torch.__config__.show()"


@functools.lru_cache(maxsize=1)
def this_machine() -> dict[str, str]:
    """This process's CPU capability (``torch.backends.cpu.get_cpu_capability()``), CPU flags
    and BLAS build."""
    import torch
    try:
        capability = torch.backends.cpu.get_cpu_capability()
    except (AttributeError, RuntimeError):
        capability = "not reported"
    return {"cpu_capability": str(capability), "cpu_flags": " ".join(cpu_flags()) or "unknown",
            "blas": blas_summary(torch.__config__.show())}

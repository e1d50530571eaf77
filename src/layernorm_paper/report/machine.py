"""The machine's arithmetic, for the report's environment: the CPU's vector features and the
BLAS / LAPACK build PyTorch uses, as each run records them in its env.json
(``experiments.rundir.this_machine``). The report falls back to the machine that builds it only
for runs that did not record theirs, and says so."""
from __future__ import annotations

from ..experiments.rundir import FLAGS, blas_summary, cpu_flags, this_machine

__all__ = ["FLAGS", "blas_summary", "cpu_flags", "this_machine"]

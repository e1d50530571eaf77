"""The paper's theory, measured: the invariance table (Table 1, ``invariance``) and the geometry of
parameter space (section 5.2, ``geometry``). See docs/paper.md sections 3 and 4.

    run_invariance(...) -> {method: {transformation: {"invariant", "max_abs_change"}}}
    measure_invariance(...) -> InvarianceResult (records, per-eps tables, margins, .format())
    run_geometry(out_dir, ...) -> dict written to out_dir/geometry.json, plus three PNG figures
"""
from .geometry import format_geometry, run_geometry
from .invariance import measure_invariance, run_invariance

__all__ = ["format_geometry", "measure_invariance", "run_geometry", "run_invariance"]

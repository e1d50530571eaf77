"""The paper's theory, measured: the invariance table (Table 1, ``invariance``) and the geometry of
parameter space (section 5.2, ``geometry``). See docs/paper.md sections 3 and 4.

    run_invariance(...) -> {method: {transformation: {"invariant", "max_abs_change"}}}
    measure_invariance(...) -> InvarianceResult (records, per-eps tables, margins, .format())
    run_geometry(out_dir, ...) -> dict written to out_dir/geometry.json, plus four PNG figures
    measure_kl_steps(x, y, ...) -> the per-update KL of the MLP with and without layer norm
"""
from .geometry import format_geometry, run_geometry
from .invariance import measure_invariance, run_invariance
from .kl_step import measure_kl_steps

__all__ = ["format_geometry", "measure_invariance", "measure_kl_steps", "run_geometry",
           "run_invariance"]

"""The paper's theory, measured: the invariance table (Table 1, ``invariance``) and the geometry of
parameter space (section 5.2, ``geometry``). PAPER.md sections 3 and 4."""
from .invariance import measure_invariance, run_invariance

__all__ = ["measure_invariance", "run_invariance"]

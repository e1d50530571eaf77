"""Table 1 of the paper, measured: which transformations of a layer's weights and data leave its
output unchanged, for batch norm, weight norm, layer norm (and RMS norm and no normalization).

Paper section 5.1 (docs/paper.md section 3). The layer is ``h = tanh(g * (a - mu) / sigma + b)``,
``a = W x`` (``layer.normalized_layer``). Each transformation acts on that layer's W (H, D) or inputs x (N, D):

    weight_matrix_rescaling     W -> d W                 one random d in [1/4, 4]
    weight_matrix_recentering   W -> W + 1 c^T           the same vector c added to every row w_i
    weight_vector_rescaling     w_i -> d_i w_i           one d_i per unit
    dataset_rescaling           x_n -> d x_n             one d for every example
    dataset_recentering         x_n -> x_n + c           one c for every example
    single_case_rescaling       x_n -> d_n x_n           one d_n per example

Nothing below reads the paper's table to decide a cell: every cell is the largest change of h over
random draws and over real data (the digits), compared with a tolerance that bounds what rounding
and eps alone can produce (``tolerance``). ``PAPER_TABLE`` is used only to print the paper next to
the measurement and to mark where they differ.
"""
from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass, field

import torch

from .. import _args
from .._io import format_table
from .layer import (METHODS, check_data, check_method, check_scales, load_digits_xy,
                    method_eps, normalized_layer, single_thread, statistics, summed_inputs)

TRANSFORMATIONS = ("weight_matrix_rescaling", "weight_matrix_recentering",
                   "weight_vector_rescaling", "dataset_rescaling", "dataset_recentering",
                   "single_case_rescaling")
TRANSFORMATION_NAMES = {
    "weight_matrix_rescaling": "weight matrix re-scaling",
    "weight_matrix_recentering": "weight matrix re-centering",
    "weight_vector_rescaling": "weight vector re-scaling",
    "dataset_rescaling": "dataset re-scaling",
    "dataset_recentering": "dataset re-centering",
    "single_case_rescaling": "single training case re-scaling",
}

# The paper's Table 1 (Ba, Kiros, Hinton 2016), True = "invariant". For side-by-side printing only.
PAPER_TABLE = {
    "batch": dict(zip(TRANSFORMATIONS, (True, False, True, True, True, False))),
    "weight": dict(zip(TRANSFORMATIONS, (True, False, True, False, False, False))),
    "layer": dict(zip(TRANSFORMATIONS, (True, True, False, True, False, True))),
}

DEFAULT_EPS = (0.0, 1e-5)
SCALE_RANGE = (0.25, 4.0)
# Safety factor on the worst-case rounding bound gamma_n * R (see ``tolerance``).
ROUNDING_FACTOR = 2.0

TOLERANCE_RULE = (
    "invariant  <=>  max |h(T(W, x)) - h(W, x)| <= tol_fp + tol_eps, where\n"
    "  tol_fp  = 2 * gamma_n * R: gamma_n = n u / (1 - n u) is the worst-case relative rounding "
    "error of a length-n sum\n"
    "            (u = unit roundoff of the dtype, n = D + values per statistic + 4 elementwise ops), "
    "R = max over the\n"
    "            original and transformed layer of max|g| * max(|W| |x|) / min(sigma) + max|b| "
    "(the magnitude of what is rounded);\n"
    "  tol_eps = max|g * z| * eps / (2 * min(sigma^2)): z = (a - mu) / sigma at eps = 0; the most "
    "eps inside the sqrt can move an\n"
    "            output whose eps = 0 value is exactly invariant (0 when eps = 0, and for weight "
    "norm and no normalization, which have no eps).\n"
    "  tanh is 1-Lipschitz, so both bounds carry from the pre-activation to h.")


def _random_scales(gen: torch.Generator, n: int, dtype: torch.dtype,
                   low: float, high: float) -> torch.Tensor:
    """n factors d with log d uniform in [log low, log high], kept away from 1 (|log d| >= log 1.5,
    when the range allows) so that a non-invariant output visibly moves."""
    lo, hi = math.log(low), math.log(high)
    logd = torch.empty(n, dtype=torch.float64).uniform_(lo, hi, generator=gen)
    away = math.log(1.5)
    if lo <= -away and hi >= away:
        near = logd.abs() < away
        logd[near] = torch.where(logd[near] < 0, logd[near] - away, logd[near] + away).clamp(lo, hi)
    return logd.exp().to(dtype)


def transform(name: str, W: torch.Tensor, x: torch.Tensor, gen: torch.Generator, *,
              scale_range: tuple[float, float] = SCALE_RANGE
              ) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """Apply transformation ``name`` to the layer's weights W (H, D) and inputs x (N, D).

    Returns (W', x', params) with the drawn d / c in params (for printing).
    """
    if name not in TRANSFORMATIONS:
        raise ValueError(f"unknown transformation {name!r}; expected one of "
                         f"{list(TRANSFORMATIONS)}. Pick one of those names.")
    (H, D), N, dt = W.shape, x.shape[0], W.dtype
    lo, hi = scale_range
    if name == "weight_matrix_rescaling":
        d = _random_scales(gen, 1, dt, lo, hi)
        return W * d, x, {"d": float(d)}
    if name == "weight_matrix_recentering":
        c = torch.randn(D, generator=gen, dtype=torch.float64).to(dt) * W.std()
        return W + c.unsqueeze(0), x, {"|c|": float(c.norm())}      # W + 1 c^T
    if name == "weight_vector_rescaling":
        d = _random_scales(gen, H, dt, lo, hi)
        return W * d.unsqueeze(1), x, {"d_i": (float(d.min()), float(d.max()))}
    if name == "dataset_rescaling":
        d = _random_scales(gen, 1, dt, lo, hi)
        return W, x * d, {"d": float(d)}
    if name == "dataset_recentering":
        c = torch.randn(D, generator=gen, dtype=torch.float64).to(dt) * x.std()
        return W, x + c.unsqueeze(0), {"|c|": float(c.norm())}
    d = _random_scales(gen, N, dt, lo, hi)                             # single_case_rescaling
    return W, x * d.unsqueeze(1), {"d_n": (float(d.min()), float(d.max()))}


def _values_per_statistic(method: str, N: int, H: int, D: int) -> int:
    return {"batch": N, "layer": H, "rms": H, "weight": D, "none": 0}[method]


def tolerance(method: str, layers: list[tuple[torch.Tensor, torch.Tensor]], g: torch.Tensor,
              b: torch.Tensor, eps: float) -> float:
    """The largest change of h that rounding and eps alone explain (``TOLERANCE_RULE``).

    layers: the (W, x) pairs compared (original and transformed).
    """
    dtype = layers[0][0].dtype
    u = torch.finfo(dtype).eps / 2
    eps = method_eps(method, eps)
    gmax, bmax = float(g.abs().max()), float(b.abs().max())
    R, gz_max, var_min = 0.0, 0.0, math.inf
    for W, x in layers:
        a = summed_inputs(W, x)
        mean, var = statistics(method, a, W)
        magnitude = float(summed_inputs(W.abs(), x.abs()).max())      # max (|W| |x|)
        sigma_min = 1.0
        if var is not None:
            vmin = float(var.min())
            if not vmin > 0:
                raise ValueError(f"the data make a {method} statistic sigma^2 exactly 0 (a unit or "
                                 f"example whose summed inputs are constant), so no tolerance "
                                 f"can be stated. Use data with varying inputs.")
            sigma_min, var_min = math.sqrt(vmin), min(var_min, vmin)
            z = (a - mean if mean is not None else a) * torch.rsqrt(var)
            gz_max = max(gz_max, float((g * z).abs().max()))
        R = max(R, gmax * magnitude / sigma_min + bmax)
    N, D = layers[0][1].shape
    H = layers[0][0].shape[0]
    n = D + _values_per_statistic(method, N, H, D) + 4
    gamma = n * u / (1 - n * u)
    tol_eps = gz_max * eps / (2 * var_min) if eps > 0 else 0.0
    return ROUNDING_FACTOR * gamma * R + tol_eps


def _layer_params(gen: torch.Generator, H: int, D: int, dtype: torch.dtype):
    W = torch.randn(H, D, generator=gen, dtype=torch.float64) / math.sqrt(D)
    g = torch.empty(H, dtype=torch.float64).uniform_(0.5, 2.0, generator=gen)
    b = 0.5 * torch.randn(H, generator=gen, dtype=torch.float64)
    return W.to(dtype), g.to(dtype), b.to(dtype)


def _sources(draws: int, real_draws: int, data: torch.Tensor | None, gen: torch.Generator,
             dtype: torch.dtype):
    """(source name, W, x, g, b): random Gaussian layers and inputs, then real data."""
    for k in range(draws):
        N, D, H = 16, 24, 12
        scale = float(torch.empty(1, dtype=torch.float64).uniform_(0.5, 3.0, generator=gen))
        offset = torch.randn(D, generator=gen, dtype=torch.float64)
        x = (torch.randn(N, D, generator=gen, dtype=torch.float64) * scale + offset).to(dtype)
        W, g, b = _layer_params(gen, H, D, dtype)
        yield f"random#{k}", (W, x, g, b)
    name = "data" if data is not None else "digits"
    if data is None:
        data = load_digits_xy(dtype)[0]
    for k in range(real_draws):
        W, g, b = _layer_params(gen, 32, data.shape[1], dtype)
        yield f"{name}#{k}", (W, data.to(dtype), g, b)


@dataclass
class InvarianceResult:
    """All measurements: one record per (eps, source, method, transformation)."""
    records: list[dict]
    settings: dict
    notes: list[str] = field(default_factory=list)

    def table(self, eps: float | None = None) -> dict:
        """``{method: {transformation: {"invariant": bool, "max_abs_change": float}}}`` — a cell is
        invariant when every record (all sources, and all eps unless ``eps`` is given) is."""
        out: dict = {}
        for r in self.records:
            if eps is not None and r["eps"] != eps:
                continue
            cell = out.setdefault(r["method"], {}).setdefault(
                r["transformation"], {"invariant": True, "max_abs_change": 0.0})
            cell["invariant"] = cell["invariant"] and r["invariant"]
            cell["max_abs_change"] = max(cell["max_abs_change"], r["max_abs_change"])
        return out

    def mismatches(self, eps: float | None = None) -> list[tuple[str, str, bool, bool]]:
        """(method, transformation, measured, paper) for every cell that differs from Table 1."""
        table = self.table(eps)
        return [(m, t, table[m][t]["invariant"], PAPER_TABLE[m][t])
                for m in PAPER_TABLE if m in table for t in TRANSFORMATIONS
                if t in table[m] and table[m][t]["invariant"] != PAPER_TABLE[m][t]]

    def margins(self, eps: float) -> dict:
        """How far the decisions are from the tolerance: the largest change/tol among invariant
        records, the smallest among non-invariant ones."""
        rs = [r for r in self.records if r["eps"] == eps]
        inv = [r["max_abs_change"] / r["tolerance"] for r in rs if r["invariant"]]
        non = [r["max_abs_change"] / r["tolerance"] for r in rs if not r["invariant"]]
        return {"max_change_over_tol_invariant": max(inv, default=None),
                "min_change_over_tol_not_invariant": min(non, default=None)}

    def to_dict(self) -> dict:
        eps_values = self.settings["eps"]
        return {"table": self.table(), "by_eps": {str(e): self.table(e) for e in eps_values},
                "paper": PAPER_TABLE, "mismatches": [list(m) for m in self.mismatches()],
                "margins": {str(e): self.margins(e) for e in eps_values},
                "tolerance_rule": TOLERANCE_RULE, "settings": self.settings, "notes": self.notes,
                "records": self.records}

    def format(self) -> str:
        return format_invariance(self)

    def markdown(self) -> str:
        """The combined table (all eps) as a markdown table for reports: measured verdict and max
        change per method, then the paper's verdicts; a difference is marked with '!'."""
        table, wrong = self.table(), {(m, t) for m, t, *_ in self.mismatches()}
        methods = self.settings["methods"]
        head = ["transformation", *methods, *(f"paper: {m}" for m in PAPER_TABLE)]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for t in TRANSFORMATIONS:
            cells = [TRANSFORMATION_NAMES[t]] + [_cell(table[m].get(t), (m, t) in wrong)
                                                 for m in methods]
            cells += ["inv" if PAPER_TABLE[m][t] else "no" for m in PAPER_TABLE]
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)


@torch.no_grad()
def measure_invariance(*, methods=METHODS, eps=DEFAULT_EPS, draws: int = 5, real_draws: int = 2,
                       data: torch.Tensor | None = None, scale_range=SCALE_RANGE, seed: int = 0,
                       dtype: torch.dtype = torch.float32) -> InvarianceResult:
    """Measure every (method, transformation) cell.

    methods: subset of ``METHODS``; eps: the eps values to run (default 0 and 1e-5); draws: random
    Gaussian layers/inputs (N=16, D=24, H=12); real_draws: random layers (H=32) on the real data,
    ``data`` (N, D) or by default the digits (1797, 64); scale_range: the interval the random
    factors d are drawn from (both > 0).
    """
    methods = tuple(methods)
    for m in methods:
        check_method(m)
    if not methods:
        raise ValueError(f"measure_invariance expected at least one method from {list(METHODS)}, "
                         f"received none.")
    lo, hi = sorted(check_scales(scale_range, "measure_invariance(scale_range=...)"))
    if data is not None:
        check_data(data, "measure_invariance(data=...)")
    eps = tuple(float(e) for e in eps)
    if not eps or any(not (e >= 0) for e in eps):
        raise ValueError(f"measure_invariance expected eps values >= 0, received {eps}. "
                         f"Use e.g. eps=(0.0, 1e-5).")
    if draws < 0 or real_draws < 0 or draws + real_draws == 0:
        raise ValueError(f"measure_invariance expected draws >= 0 and real_draws >= 0 with at "
                         f"least one in total, received draws={draws}, real_draws={real_draws}.")
    with single_thread():
        return _measure(methods, eps, draws, real_draws, data, (lo, hi), seed, dtype)


def _measure(methods, eps, draws, real_draws, data, scale_range, seed, dtype) -> InvarianceResult:
    lo, hi = scale_range
    gen = torch.Generator().manual_seed(seed)
    records, notes = [], []
    for source, (W, x, g, b) in _sources(draws, real_draws, data, gen, dtype):
        for tname in TRANSFORMATIONS:
            W2, x2, params = transform(tname, W, x, gen, scale_range=(lo, hi))
            for e in eps:
                for m in methods:
                    h1 = normalized_layer(m, W, x, g, b, eps=e, f=torch.tanh)
                    h2 = normalized_layer(m, W2, x2, g, b, eps=e, f=torch.tanh)
                    change = float((h2 - h1).abs().max())
                    tol = tolerance(m, [(W, x), (W2, x2)], g, b, e)
                    records.append({"eps": e, "source": source, "method": m,
                                    "transformation": tname, "max_abs_change": change,
                                    "tolerance": tol, "invariant": change <= tol,
                                    "params": params})
    if "weight" in methods:
        measured = all(r["invariant"] for r in records
                       if r["method"] == "weight" and r["transformation"] == "dataset_rescaling")
        notes.append(_weight_norm_dataset_rescaling_note(gen, dtype, data, measured))
    settings = {"methods": list(methods), "eps": list(eps), "draws": draws,
                "real_draws": real_draws, "real_data": "digits (1797, 64)" if data is None
                else f"data {tuple(data.shape)}", "scale_range": [lo, hi], "seed": seed,
                "dtype": str(dtype).replace("torch.", ""), "f": "tanh"}
    return InvarianceResult(records, settings, notes)


def _weight_norm_dataset_rescaling_note(gen: torch.Generator, dtype: torch.dtype,
                                        data: torch.Tensor | None, measured: bool) -> str:
    """Measure what weight norm does under x -> d x (its pre-activation minus b scales by d) and
    say which of the paper's two statements the measured verdict ``measured`` agrees with."""
    x = load_digits_xy(dtype)[0] if data is None else data.to(dtype)
    where = "the digits" if data is None else f"the data {tuple(x.shape)}"
    W, g, b = _layer_params(gen, 32, x.shape[1], dtype)
    d = 3.0
    y1 = normalized_layer("weight", W, x, g, b)
    y2 = normalized_layer("weight", W, d * x, g, b)
    equiv = float(((y2 - b) - d * (y1 - b)).abs().max())
    moved = float((y2 - y1).abs().max())
    return (f"weight norm x dataset re-scaling: the paper's text says every method is invariant to "
            f"re-scaling the dataset; its Table 1 says weight norm is not. Measured: "
            f"{'invariant' if measured else 'not invariant'}. "
            f"With mu = 0 and sigma = ||w_i|| no statistic sees x, so the pre-activation is "
            f"equivariant instead: on {where} with d = {d:g}, max |y(dx) - y(x)| = {moved:.3g} "
            f"while max |(y(dx) - b) - d (y(x) - b)| = {equiv:.2g}. The measurement agrees with the "
            f"{'text, not with the table' if measured else 'table, not with the text'}.")


def run_invariance(**kwargs) -> dict:
    """Measure Table 1 and return ``{method: {transformation: {"invariant": bool,
    "max_abs_change": float}}}`` (over all eps values and sources), the ``--json`` output.
    Keyword arguments are ``measure_invariance``'s. Quick: about a second."""
    return measure_invariance(**kwargs).table()


def _cell(c: dict | None, mark: bool = False) -> str:
    if c is None:
        return ""
    return f"{'inv' if c['invariant'] else 'no'} {c['max_abs_change']:.1e}{' !' if mark else ''}"


def format_invariance(result: InvarianceResult) -> str:
    """The measured table next to the paper's, one block per eps, mismatches marked with '!'."""
    methods = result.settings["methods"]
    s = result.settings
    lines = [f"Table 1 measured: h = tanh(g * (a - mu) / sigma + b), a = W x; {s['draws']} random "
             f"draws (N=16, D=24, H=12) + {s['real_draws']} random layers (H=32) on "
             f"{s['real_data']}; d in [{s['scale_range'][0]:g}, {s['scale_range'][1]:g}]; "
             f"{s['dtype']}.",
             "Cell: measured verdict and max |change of h| over all draws; 'paper' columns: "
             "Table 1 of the paper; '!' marks a difference."]
    for e in s["eps"]:
        table = result.table(e)
        wrong = {(m, t) for m, t, *_ in result.mismatches(e)}
        rows = []
        for t in TRANSFORMATIONS:
            row = {"transformation": TRANSFORMATION_NAMES[t]}
            for m in methods:
                row[m] = _cell(table[m].get(t), (m, t) in wrong)
            for m in PAPER_TABLE:
                row[f"paper {m}"] = "inv" if PAPER_TABLE[m][t] else "no"
            rows.append(row)
        cols = ["transformation", *methods, *(f"paper {m}" for m in PAPER_TABLE)]
        margins = result.margins(e)
        lines += ["", f"eps = {e:g}", format_table(rows, cols),
                  f"decision margins: invariant cells change <= "
                  f"{_fmt_ratio(margins['max_change_over_tol_invariant'])} x tol; non-invariant "
                  f"cells change >= {_fmt_ratio(margins['min_change_over_tol_not_invariant'])} x tol"]
    mism = result.mismatches()
    lines.append("")
    if mism:
        for m, t, meas, paper in mism:
            lines.append(f"! {m} x {TRANSFORMATION_NAMES[t]}: measured "
                         f"{'invariant' if meas else 'not invariant'}, paper says "
                         f"{'invariant' if paper else 'not invariant'}.")
    else:
        lines.append("Every measured cell of batch, weight and layer norm agrees with the paper's "
                     "Table 1 (at every eps).")
    lines += [f"Note: {n}" for n in result.notes]
    lines += ["", "Tolerance rule:", TOLERANCE_RULE]
    return "\n".join(lines)


def _fmt_ratio(v: float | None) -> str:
    return "-" if v is None else f"{v:.2g}"


_DTYPES = {"float32": torch.float32, "float64": torch.float64}


def _run(args: argparse.Namespace) -> int:
    result = measure_invariance(methods=args.methods, eps=args.eps, draws=args.draws,
                                real_draws=args.real_draws, seed=args.seed,
                                dtype=_DTYPES[args.dtype])
    if args.json:
        print(json.dumps(result.table(), indent=2))
    elif args.json_detail:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print(result.format())
    return 0


def add_commands(sub) -> None:
    p = sub.add_parser("invariance", help="Table 1 measured: invariances of batch/weight/layer "
                       "norm, next to the paper's table")
    p.add_argument("--json", action="store_true", help="print {method: {transformation: "
                   "{invariant, max_abs_change}}} (over all eps values) instead of the table")
    p.add_argument("--json-detail", action="store_true", help="print every measurement, the "
                   "per-eps tables, tolerances, margins and the paper's table as JSON")
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    p.add_argument("--eps", nargs="+", type=_args.nonnegative_float, default=list(DEFAULT_EPS),
                   help="eps values to run (default: 0 1e-5)")
    p.add_argument("--draws", type=_args.positive_int, default=5, help="random Gaussian draws (default 5)")
    p.add_argument("--real-draws", type=_args.nonnegative_int, default=2,
                   help="random layers on the digits data (default 2)")
    p.add_argument("--dtype", choices=sorted(_DTYPES), default="float32")
    p.add_argument("--seed", type=_args.seed, default=0)
    p.set_defaults(func=_run)

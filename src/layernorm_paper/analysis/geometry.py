"""The geometry of parameter space (paper section 5.2), measured with the exact Fisher information.

docs/paper.md section 4. The model is a normalized softmax GLM on the digits,
``p(y | x) = softmax(g * (W x - mu) / sigma + b)`` (``layer.normalized_layer``, one method per run),
and its Fisher information

    F(theta) = E_x E_{y ~ p(y|x)} [ grad log p(y|x) grad log p(y|x)^T ]

is computed exactly: every per-example, per-class gradient by forward-mode autograd
(``torch.func.jacfwd``: one pass per parameter coordinate, cheaper than one backward per output
here) and the expectation over y summed with the model's own probabilities (no closed-form Fisher
typed in).
For batch norm an example's prediction depends on the whole batch; the gradients are taken through
the batch statistics, the y_n being independent given the batch.

Four measurements, one figure each:

1. ``curvature``: scale a weight vector by d in [1/4, 4]. Where the prediction is unchanged
   (w_i alone for batch and weight norm, the whole W for layer and RMS norm, whose sigma is shared
   by all units), the Fisher quadratic form along w_i scales as d^-2: a larger weight norm means a
   smaller step in prediction space for the same parameter step. A plain GLM is the contrast.
2. ``training``: an MLP with and without layer norm trained with SGD and Adam; per step the weight
   norms and the angular step. Under layer norm the loss does not depend on ||W||, the gradient is
   orthogonal to W and shrinks as 1/||W||. (The ratio angle / (||W|| ||grad||) is printed too:
   for an SGD step it equals lr sin(grad, W) / ||W||^2 in any network, so it tells the arms apart
   by nothing but their weight norms; the decisive measure is point 4.)
3. ``gain``: the metric along the gains g (eqs. 32-35) when the input is re-scaled by lambda:
   unchanged for batch and layer norm, growing with lambda for weight norm and a plain GLM (whose
   "gain" is the magnitude of w_i).

4. ``kl_step``: the same MLP with and without layer norm trained with SGD over several seeds; per
   update the step's length in function space, KL(p_t || p_t+1) on a fixed held-out probe batch,
   and ||W|| of the hidden layers: section 5.2's implicit learning-rate decay is a per-update KL
   that falls more, late against early in training, under layer norm than without it.

The exact Fisher lives in ``fisher``, the training runs of point 2 in ``weight_growth``, those of
point 4 in ``kl_step``, the figures in ``geometry_figures``; this module measures points 1 and 3
and runs all four.
"""
from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

import torch

from .. import _args
from .._io import atomic_write_json, format_table
from .fisher import _glm_logp, fisher_block, fit_exponent, kl_divergence
from .geometry_figures import plot_curvature, plot_gain, plot_kl_steps, plot_training
from .kl_step import KL_SEEDS, measure_kl_steps
from .invariance import tolerance
from .layer import (METHODS, check_data, check_method, check_scales, load_digits_xy,
                    single_thread)
from .weight_growth import OPTIMIZERS, TRAIN_NORMS, measure_training, train_mlp

__all__ = ["SCALES", "UNIT", "TRAIN_NORMS", "OPTIMIZERS", "fisher_block", "kl_divergence",
           "fit_exponent", "measure_curvature", "measure_gain_metric", "train_mlp",
           "measure_training", "measure_kl_steps", "plot_curvature", "plot_training", "plot_gain",
           "plot_kl_steps", "run_geometry", "format_geometry", "add_commands"]

SCALES = tuple(2.0 ** (k / 2) for k in range(-4, 5))          # 0.25 ... 4, 9 points
UNIT = 0                                                        # the unit i whose w_i is scaled


# --------------------------------------------------------------------------- curvature and gain

def _glm(x: torch.Tensor, K: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    D = x.shape[1]
    W = torch.randn(K, D, generator=gen, dtype=torch.float64).to(x.dtype) / math.sqrt(D)
    g = torch.ones(K, dtype=x.dtype)
    b = torch.zeros(K, dtype=x.dtype)
    return W, g, b


def _tangent(w: torch.Tensor, seed: int) -> torch.Tensor:
    """A fixed unit direction orthogonal to w (the radial direction has zero curvature wherever
    the prediction is invariant to the scale of w)."""
    gen = torch.Generator().manual_seed(seed + 1)
    v = torch.randn(w.shape, generator=gen, dtype=torch.float64).to(w.dtype)
    v = v - (v @ w) / (w @ w) * w
    return v / v.norm()


@single_thread()
def measure_curvature(x: torch.Tensor, *, methods=METHODS, scales=SCALES, K: int = 10,
                      eps: float = 1e-5, seed: int = 0) -> dict:
    """Point 1: Fisher quadratic form along w_i versus the scale d of w_i (or of all of W).

    For each method and each scaling ("w_i": row UNIT only; "W": the whole matrix) returns the
    quadratic form v^T F_ii v along a fixed unit tangent v, the trace of F_ii, the largest change of
    log p compared with d = 1, and the fitted log-log exponents. ``main`` picks, by measurement,
    the scaling that leaves the prediction unchanged (w_i first, as in the paper's argument): log p
    counts as unchanged when it moves less than twice the invariance tolerance of the logits
    (``invariance.tolerance``; log_softmax is 2-Lipschitz in the max norm). ``kl_check`` compares
    KL(p(theta) || p(theta + t v)) with 0.5 t^2 v^T F v at d = 1 (ratio ~ 1 if F is right).
    """
    scales = check_scales(scales, "measure_curvature(scales=...)")
    W, g, b = _glm(x, K, seed)
    v = _tangent(W[UNIT], seed)
    out = {}
    for method in methods:
        check_method(method)
        per = {}
        base_logp = _glm_logp(method, W, g, b, x, eps)
        for scaling in ("w_i", "W"):
            quad, trace, moved, unchanged = [], [], [], True
            for d in scales:
                Wd = W.clone()
                if scaling == "w_i":
                    Wd[UNIT] = d * W[UNIT]
                else:
                    Wd = d * W
                F = fisher_block(method, Wd, g, b, x, wrt=f"w{UNIT}", eps=eps)
                quad.append(float(v @ F @ v))
                trace.append(float(F.diagonal().sum()))
                moved.append(float((_glm_logp(method, Wd, g, b, x, eps) - base_logp).abs().max()))
                unchanged &= moved[-1] <= 2 * tolerance(method, [(W, x), (Wd, x)], g, b, eps)
            per[scaling] = {"quadratic_form": quad, "trace": trace,
                            "max_abs_logp_change": moved,
                            "exponent": fit_exponent(scales, quad),
                            "trace_exponent": fit_exponent(scales, trace),
                            "prediction_invariant": unchanged}
        main = next((s for s in ("w_i", "W") if per[s]["prediction_invariant"]), "w_i")
        out[method] = {**per, "main": main, "exponent": per[main]["exponent"],
                       "kl_check": _kl_check(method, W, g, b, x, v, eps)}
    return {"scales": list(scales), "unit": UNIT, "K": K, "N": x.shape[0], "D": x.shape[1],
            "eps": eps, "methods": out}


def _kl_check(method: str, W, g, b, x, v, eps: float, t: float = 1e-3) -> float:
    """KL(p(W) || p(W + t v e_i)) / (0.5 t^2 v^T F_ii v): ~1 when the Fisher is the KL's Hessian."""
    F = fisher_block(method, W, g, b, x, wrt=f"w{UNIT}", eps=eps)
    W2 = W.clone()
    W2[UNIT] = W[UNIT] + t * v
    return kl_divergence(method, (W, g, b), (W2, g, b), x, eps) / (0.5 * t * t * float(v @ F @ v))


@single_thread()
def measure_gain_metric(x: torch.Tensor, *, methods=METHODS, scales=SCALES, K: int = 10,
                        eps: float = 1e-5, seed: int = 0) -> dict:
    """Point 3 (eqs. 32-35): the Fisher metric along the gains g at inputs lambda * x, relative to
    lambda = 1. For "none" the gain multiplies W x, i.e. it is the magnitude of each w_i."""
    scales = check_scales(scales, "measure_gain_metric(scales=...)")
    W, g, b = _glm(x, K, seed)
    out = {}
    for method in methods:
        check_method(method)
        metric, unit_metric = [], []
        for lam in scales:
            F = fisher_block(method, W, g, b, lam * x, wrt="g", eps=eps)
            metric.append(float(F.diagonal().sum()))
            unit_metric.append(float(F[UNIT, UNIT]))
        ref = metric[min(range(len(scales)), key=lambda k: abs(math.log(scales[k])))]
        ratio = [m / ref for m in metric]
        out[method] = {"trace": metric, "unit_metric": unit_metric, "ratio": ratio,
                       "exponent": fit_exponent(scales, metric),
                       "max_abs_log_ratio": max(abs(math.log(r)) for r in ratio)}
    return {"scales": list(scales), "K": K, "N": x.shape[0], "eps": eps, "methods": out}


# --------------------------------------------------------------------------- entry points

def run_geometry(out_dir: str | os.PathLike, *, methods=METHODS, scales=SCALES,
                 n_examples: int = 256, steps: int = 300, data: torch.Tensor | None = None,
                 labels: torch.Tensor | None = None, seed: int = 0, kl_seeds: int = KL_SEEDS,
                 progress: bool = False) -> dict:
    """All four measurements on the digits (or ``data``/``labels``); writes ``geometry.json`` and
    ``curvature.png``, ``training.png``, ``gain.png``, ``kl_step.png`` into ``out_dir`` and
    returns the JSON dict.

    n_examples: examples in the Fisher expectation (float64); steps: SGD/Adam steps per training
    run (points 2 and 4); kl_seeds: seeds per arm of point 4 (``seed``, ``seed + 1``, ...). The
    defaults take seconds.
    """
    if not (isinstance(kl_seeds, int) and kl_seeds >= 1):
        raise ValueError(f"run_geometry expected kl_seeds, the seeds per arm of the KL-step runs, "
                         f"to be an integer >= 1, received {kl_seeds!r}.")
    with single_thread():
        return _run_geometry(out_dir, methods=methods, scales=scales, n_examples=n_examples,
                             steps=steps, data=data, labels=labels, seed=seed,
                             kl_seeds=kl_seeds, progress=progress)


def _run_geometry(out_dir, *, methods, scales, n_examples, steps, data, labels, seed, kl_seeds,
                  progress) -> dict:
    methods = tuple(methods)
    for m in methods:
        check_method(m)
    scales = check_scales(scales, "run_geometry(scales=...)")
    if 1.0 not in scales:
        raise ValueError(f"run_geometry expected the scales to include 1.0 (the reference point), "
                         f"received {scales}. Add 1.0.")
    if data is None:
        data, labels = load_digits_xy()
        data = data / 16.0
    else:
        check_data(data, "run_geometry(data=...)")
        if labels is None or labels.shape != (data.shape[0],):
            raise ValueError(f"run_geometry expected labels of shape ({data.shape[0]},) with the "
                             f"data, received {None if labels is None else tuple(labels.shape)}. "
                             f"Pass one integer class per example.")
    if n_examples < 2:
        raise ValueError(f"run_geometry expected n_examples >= 2, received {n_examples}.")
    out = Path(out_dir)
    x64 = data[:n_examples].to(torch.float64)
    curv = measure_curvature(x64, methods=methods, scales=scales, seed=seed)
    gain = measure_gain_metric(x64, methods=methods, scales=scales, seed=seed)
    runs = measure_training(data.float(), labels, steps=steps, seed=seed, progress=progress)
    kl = measure_kl_steps(data.float(), labels, steps=steps,
                          seeds=range(seed, seed + kl_seeds), progress=progress)
    result = {
        "curvature": curv, "gain": gain,
        "training": runs, "kl_step": kl,
        "figures": {"curvature": plot_curvature(curv, out / "curvature.png"),
                    "training": plot_training(runs, out / "training.png"),
                    "gain": plot_gain(gain, out / "gain.png"),
                    "kl_step": plot_kl_steps(kl, out / "kl_step.png")},
    }
    atomic_write_json(out / "geometry.json", result)
    return result


def format_geometry(result: dict) -> str:
    curv, gain, runs = result["curvature"], result["gain"], result["training"]
    rows = []
    for m, r in curv["methods"].items():
        rows.append({"method": m, "scaled": r["main"], "curvature exponent": r["exponent"],
                     "w_i-only exponent": r["w_i"]["exponent"],
                     "max |dlogp| (w_i)": f"{max(r['w_i']['max_abs_logp_change']):.1e}",
                     "gain exponent": gain["methods"][m]["exponent"],
                     "gain ratio @1/4": gain["methods"][m]["ratio"][0],
                     "gain ratio @4": gain["methods"][m]["ratio"][-1]})
    trows = []
    for name, run in runs.items():
        s = run["summary"]["layers"][0]
        trows.append({"run": name, "||W1|| first": s["norm_first"], "||W1|| last": s["norm_last"],
                      "angle late/early": s["angle_late_over_early"],
                      "mean |cos(grad,W1)|": f"{s['mean_abs_cos_grad_w']:.1e}",
                      "eff lr first": f"{s['eff_lr_early']:.2e}",
                      "eff lr last": f"{s['eff_lr_late']:.2e}",
                      "eff-lr exponent vs ||W1||": s["eff_lr_exponent_vs_norm"],
                      "Fisher decay last": run["summary"]["fisher_decay_last"],
                      "decay exponent": run["summary"]["fisher_decay_exponent"],
                      "|dlogp| rescaled": f"{run['summary']['rescaled_logp_change_max']:.1e}",
                      "loss last": run["summary"]["loss_last"],
                      "train acc": run["train_accuracy"]})
    return "\n".join([
        f"1+3. Softmax GLM on {curv['N']} digits (K={curv['K']}), exact Fisher by autograd; "
        f"curvature = Fisher quadratic form along w_{curv['unit']} vs scale d of the weights "
        f"('scaled': the scaling that leaves the prediction unchanged, found by measurement); "
        f"gain = metric along g vs input scale lambda.",
        format_table(rows, list(rows[0])),
        "",
        "2. MLP 64-64-64-10 on digits, first hidden layer W1, per step: ||W1||, the angle W1 turns "
        "by, cos(grad, W1) (0: the loss ignores ||W1||), eff lr = angle / (||W1|| ||grad||) "
        "(for SGD lr sin(grad, W1) / ||W1||^2 in any network: not a test of section 5.2);",
        "   every 10 steps the Fisher form u'Fu along a tangent u at W1 over the same at W1 "
        "rescaled to its initial norm ('Fisher decay': same step, how much less the prediction "
        "moves), with the",
        "   log-log exponent against ||W1|| / ||W1_0|| and the largest change of log p that "
        "rescaling causes (0 under LN: the same function, so the decay is purely implicit).",
        format_table(trows, list(trows[0])),
        "",
        *_format_kl(result.get("kl_step")),
        f"Files: {', '.join(result['figures'].values())} and geometry.json",
    ])


def _mean_text(values) -> str:
    """The mean of the defined values (None: an angle of 0 early), or n/a."""
    v = [x for x in values if x is not None]
    return f"{sum(v) / len(v):.3f}" if v else "n/a"


def _format_kl(kl: dict | None) -> list[str]:
    """Point 4's lines: per arm, over seeds, the per-update KL early and late and their ratio."""
    if not kl:
        return []
    w = kl["windows"]
    rows = []
    for norm, runs in kl["runs"].items():
        s = [r["summary"] for r in runs]
        logs = [x["log_kl_late_over_early"] for x in s if x["log_kl_late_over_early"] is not None]
        mean = lambda v: sum(v) / len(v)  # noqa: E731
        rows.append({"arm": norm, "seeds": len(runs),
                     "KL/update early": f"{mean([x['kl_early'] for x in s]):.2e}",
                     "KL/update late": f"{mean([x['kl_late'] for x in s]):.2e}",
                     "late/early (geo. mean over seeds)":
                         f"{math.exp(mean(logs)):.3f}" if logs else "n/a",
                     "angle late/early": _mean_text([x["angle_late_over_early"] for x in s]),
                     "||W1|| growth": f"{mean([x['norm_growth'][0] for x in s]):.2f}",
                     "final train loss": f"{mean([r['final_train_loss'] for r in runs]):.3f}"})
    return [f"4. The same MLP, {kl['optimizer'].upper()} lr {kl['lr']:g}, {kl['steps']} updates, "
            f"trained on {kl['train_size']} digits; per update KL(p_t || p_t+1) mean over a "
            f"held-out probe of {kl['probe_size']}; early = updates {w['early'][0] + 1}-"
            f"{w['early'][1]}, late = {w['late'][0] + 1}-{w['late'][1]} (counted from 1, after "
            f"a warm-up of {w['warmup']}).", format_table(rows, list(rows[0])), ""]


def _run(args: argparse.Namespace) -> int:
    from .._io import clean_stale_temp_files, exclusive_lock, output_dir
    out = output_dir(args.out)
    with exclusive_lock(out / ".geometry.lock", f"another `layernorm geometry` (pid {{pid}}) is "
                        f"writing {out} right now; wait for it, or pass another --out."):
        clean_stale_temp_files(out)      # atomic writes cut short by a kill
        result = run_geometry(out, methods=args.methods, steps=args.steps,
                              n_examples=args.examples, seed=args.seed,
                              kl_seeds=args.kl_seeds, progress=True)
    print(format_geometry(result))
    return 0


def add_commands(sub) -> None:
    p = sub.add_parser("geometry", help="section 5.2 measured: Fisher curvature vs weight norm, "
                       "implicit learning-rate decay, gain metric under input re-scaling")
    p.add_argument("--out", required=True, help="directory for geometry.json and the figures")
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    p.add_argument("--steps", type=_args.int_at_least(2), default=300,
                   help="training steps per run, >= 2 (default 300)")
    p.add_argument("--examples", type=_args.positive_int, default=256,
                   help="digits examples in the Fisher expectation (default 256)")
    p.add_argument("--seed", type=_args.seed, default=0)
    p.add_argument("--kl-seeds", type=_args.positive_int, default=KL_SEEDS,
                   help=f"seeds per arm of the per-update KL runs (default {KL_SEEDS})")
    p.set_defaults(func=_run)

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

Three measurements, one figure each:

1. ``curvature``: scale a weight vector by d in [1/4, 4]. Where the prediction is unchanged
   (w_i alone for batch and weight norm, the whole W for layer and RMS norm, whose sigma is shared
   by all units), the Fisher quadratic form along w_i scales as d^-2: a larger weight norm means a
   smaller step in prediction space for the same parameter step. A plain GLM is the contrast.
2. ``training``: an MLP with and without layer norm trained with SGD and Adam; per step the weight
   norms and the angular step. Under layer norm the loss does not depend on ||W||, the gradient is
   orthogonal to W and shrinks as 1/||W||, so the effective learning rate on the sphere,
   angle / (||W|| ||grad||), falls as ||W|| grows (exactly lr / ||W||^2 for SGD).
3. ``gain``: the metric along the gains g (eqs. 32-35) when the input is re-scaled by lambda:
   unchanged for batch and layer norm, growing with lambda for weight norm and a plain GLM (whose
   "gain" is the magnitude of w_i).
"""
from __future__ import annotations

import argparse
import functools
import math
import os
import warnings
from pathlib import Path

import torch
from torch import nn
from tqdm import tqdm

from .. import _args
from .._io import atomic_write_bytes, atomic_write_json
from .._io import format_table
from ..norms import norm_block
from .invariance import tolerance
from .layer import (METHOD_NAMES, METHODS, check_data, check_method, check_scales,
                    load_digits_xy, normalized_layer, single_thread)

SCALES = tuple(2.0 ** (k / 2) for k in range(-4, 5))          # 0.25 ... 4, 9 points
UNIT = 0                                                        # the unit i whose w_i is scaled
TRAIN_NORMS = ("layer", "none")
OPTIMIZERS = {"sgd": 0.5, "adam": 0.01}                         # optimizer -> learning rate


# --------------------------------------------------------------------------- exact Fisher

@functools.cache
def _load_forward_ad() -> None:
    """torch's forward-mode AD loads its jvp decompositions on first use through
    ``torch.jit.script``, which torch itself now reports as deprecated (a DeprecationWarning raised
    inside torch, on every forward-mode first use). Load them once here with that one warning
    silenced, so ``filterwarnings = error`` still catches everything else."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch.jit.script.*deprecated",
                                category=DeprecationWarning)
        try:
            import torch._decomp.decompositions_for_jvp  # noqa: F401
        except ImportError:                                    # other torch versions: nothing to do
            pass


def _glm_logp(method: str, W: torch.Tensor, g: torch.Tensor, b: torch.Tensor, x: torch.Tensor,
              eps: float) -> torch.Tensor:
    """log p(y | x) of the normalized softmax GLM, (N, K)."""
    return normalized_layer(method, W, x, g, b, eps=eps).log_softmax(-1)


def fisher_block(method: str, W: torch.Tensor, g: torch.Tensor, b: torch.Tensor,
                 x: torch.Tensor, *, wrt: str, eps: float = 1e-5) -> torch.Tensor:
    """Exact Fisher block of one parameter: ``wrt`` is ``"g"`` (the K gains, -> (K, K)) or
    ``"w<i>"`` (row i of W, -> (D, D)).

    F = (1/N) sum_n sum_y p(y|x_n) J_ny J_ny^T with J_ny = d log p(y|x_n) / d theta by autograd.
    """
    if wrt == "g":
        def logp(theta):
            return _glm_logp(method, W, theta, b, x, eps)
        theta = g
    elif wrt.startswith("w") and wrt[1:].isdigit() and int(wrt[1:]) < W.shape[0]:
        i = int(wrt[1:])

        def logp(theta):
            return _glm_logp(method, torch.cat([W[:i], theta[None], W[i + 1:]]), g, b, x, eps)
        theta = W[i]
    else:
        raise ValueError(f"fisher_block expected wrt='g' or 'w<i>' with 0 <= i < {W.shape[0]}, "
                         f"received {wrt!r}. Use e.g. wrt='w0' for the first unit's weights.")
    _load_forward_ad()
    J = torch.func.jacfwd(logp)(theta)                          # (N, K, P)
    p = logp(theta).exp().detach()                              # (N, K)
    return torch.einsum("nk,nki,nkj->ij", p, J, J) / x.shape[0]


def kl_divergence(method: str, params: tuple, params2: tuple, x: torch.Tensor,
                  eps: float = 1e-5) -> float:
    """Mean over x of KL(p(.|x; params) || p(.|x; params2)); params = (W, g, b)."""
    lp, lq = _glm_logp(method, *params, x, eps), _glm_logp(method, *params2, x, eps)
    return float((lp.exp() * (lp - lq)).sum(-1).mean())


def fit_exponent(scales, values) -> float:
    """Least-squares slope of log(value) against log(scale)."""
    xs = torch.tensor([math.log(s) for s in scales], dtype=torch.float64)
    ys = torch.tensor([math.log(v) for v in values], dtype=torch.float64)
    xc = xs - xs.mean()
    return float((xc * (ys - ys.mean())).sum() / xc.square().sum())


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


# --------------------------------------------------------------------------- training

def _mlp(norm: str, sizes: tuple[int, ...], seed: int) -> nn.Sequential:
    """Hidden layers Linear -> norm -> ReLU (no bias before a norm: it would be removed by the
    centering), then a plain Linear to the logits (never normalized, as in the paper)."""
    torch.manual_seed(seed)
    layers = []
    for din, dout in zip(sizes[:-2], sizes[1:-1]):
        layers += [*norm_block(nn.Linear(din, dout, bias=norm == "none"), norm), nn.ReLU()]
    layers.append(nn.Linear(sizes[-2], sizes[-1]))
    return nn.Sequential(*layers)


def _cos(u: torch.Tensor, v: torch.Tensor) -> float:
    u, v = u.double().flatten(), v.double().flatten()
    return float(u @ v / (u.norm() * v.norm()).clamp_min(1e-300))


def _angle(w0: torch.Tensor, w1: torch.Tensor) -> float:
    """Angle between two weight matrices seen as vectors, accurate for tiny angles."""
    w0, w1 = w0.double().flatten(), w1.double().flatten()
    u = w0 / w0.norm()
    along = w1 @ u
    return float(torch.atan2((w1 - along * u).norm(), along))


@single_thread()
def train_mlp(x: torch.Tensor, y: torch.Tensor, *, norm: str, optimizer: str, steps: int = 300,
              batch_size: int = 32, hidden: int = 64, depth: int = 2, lr: float | None = None,
              probe_every: int = 10, seed: int = 0, progress: bool = False) -> dict:
    """Point 2: train an MLP on (x, y) and log per step, for every hidden weight matrix, its norm,
    its gradient norm, cos(grad, W) and the angle it turns by in that step; every ``probe_every``
    steps also the exact Fisher quadratic form of the first hidden layer along a fixed tangent
    direction (on the first 256 examples), at W_t and at W_t rescaled to the initial norm: their
    ratio is how much less the prediction moves for the same parameter step because the norm grew
    (exactly (||W_0|| / ||W_t||)^2 under layer norm, where both weights give the same function)."""
    check_data(x, "train_mlp(x=...)")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; expected one of {sorted(OPTIMIZERS)}.")
    if steps < 2:
        raise ValueError(f"train_mlp expected steps >= 2 (an angle needs two weights), received "
                         f"{steps}.")
    lr = OPTIMIZERS[optimizer] if lr is None else lr
    model = _mlp(norm, (x.shape[1],) + (hidden,) * depth + (int(y.max()) + 1,), seed)
    hidden_weights = [m.weight for m in model if isinstance(m, nn.Linear)][:-1]
    opt = (torch.optim.SGD if optimizer == "sgd" else torch.optim.Adam)(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    log = {"loss": [], **{k: [[] for _ in hidden_weights]
                          for k in ("norm", "grad_norm", "grad_cos", "angle")},
           "probe_step": [], "probe_norm": [], "probe_fisher": [], "probe_fisher_at_norm0": [],
           "probe_logp_change_at_norm0": []}
    probe = _FisherProbe(model, hidden_weights[0], x[:256], gen)
    for step in tqdm(range(steps), desc=f"train {norm}/{optimizer}", leave=False, disable=not progress):
        if step % probe_every == 0 or step == steps - 1:
            log["probe_step"].append(step)
            log["probe_norm"].append(float(hidden_weights[0].detach().norm()))
            at_w, at_norm0, moved = probe()
            log["probe_fisher"].append(at_w)
            log["probe_fisher_at_norm0"].append(at_norm0)
            log["probe_logp_change_at_norm0"].append(moved)
        idx = torch.randint(0, x.shape[0], (batch_size,), generator=gen)
        loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        before = [w.detach().clone() for w in hidden_weights]
        opt.step()
        log["loss"].append(loss.item())
        for k, (w, w0) in enumerate(zip(hidden_weights, before)):
            log["norm"][k].append(float(w0.norm()))
            log["grad_norm"][k].append(float(w.grad.norm()))
            log["grad_cos"][k].append(_cos(w.grad, w0))
            log["angle"][k].append(_angle(w0, w.detach()))
    with torch.no_grad():
        acc = float((model(x).argmax(-1) == y).float().mean())
    return {"norm": norm, "optimizer": optimizer, "lr": lr, "steps": steps,
            "batch_size": batch_size, "train_accuracy": acc, "log": log,
            "summary": _training_summary(log)}


class _FisherProbe:
    """u^T F(W) u for the weight W of ``model``: exact, by one forward-mode pass (jvp) over the
    probe examples, u a fixed random direction made orthogonal to the current W, unit length."""

    def __init__(self, model: nn.Module, weight: torch.Tensor, x: torch.Tensor,
                 gen: torch.Generator) -> None:
        self.model, self.weight, self.x = model, weight, x
        self.name = next(n for n, p in model.named_parameters() if p is weight)
        self.u0 = torch.randn(weight.shape, generator=gen, dtype=weight.dtype)
        self.norm0 = float(weight.detach().norm())

    @torch.no_grad()
    def __call__(self) -> tuple[float, float, float]:
        """(u'F(W)u, u'F(W rescaled to ||W_0||)u, max |log p(W) - log p(W rescaled)|)."""
        W = self.weight.detach()
        u = self.u0 - (self.u0 * W).sum() / (W * W).sum() * W
        u = u / u.norm()
        q, lp = self._quadratic_form(W, u)
        q0, lp0 = self._quadratic_form(W * (self.norm0 / W.norm()), u)
        return q, q0, float((lp - lp0).abs().max())

    def _quadratic_form(self, W: torch.Tensor, u: torch.Tensor) -> tuple[float, torch.Tensor]:
        def logp(w):
            return torch.func.functional_call(self.model, {self.name: w}, (self.x,)).log_softmax(-1)
        _load_forward_ad()
        lp, du = torch.func.jvp(logp, (W,), (u,))                   # (N, K) each
        return float((lp.exp() * du.square()).sum(-1).mean()), lp


def _decay_exponent(log: dict) -> float | None:
    """Fitted exponent of u'F(W_t)u / u'F(W_t ||W_0|| / ||W_t||)u against ||W_t|| / ||W_0||."""
    n0 = log["probe_norm"][0]
    pts = [(n / n0, a / b) for n, a, b in zip(log["probe_norm"], log["probe_fisher"],
                                              log["probe_fisher_at_norm0"]) if n > 1.02 * n0]
    return fit_exponent(*zip(*pts)) if len(pts) >= 2 else None


def _training_summary(log: dict) -> dict:
    """Per hidden layer, early (first 10% of steps) vs late (last 10%): the weight norm, the
    angular step, the effective learning rate angle / (||W|| ||grad||) and its fitted log-log
    exponent against ||W||, and the mean |cos(grad, W)| (0 when the loss ignores ||W||)."""
    layers = []
    for norms, grads, cos, angles in zip(log["norm"], log["grad_norm"], log["grad_cos"],
                                         log["angle"]):
        k = max(len(norms) // 10, 1)
        ok = [t for t, (a, gr) in enumerate(zip(angles, grads)) if a > 0 and gr > 0]
        eff = [angles[t] / (norms[t] * grads[t]) for t in ok]
        n_eff = [norms[t] for t in ok]
        mean = lambda v: sum(v) / len(v)  # noqa: E731
        layers.append({
            "norm_first": norms[0], "norm_last": norms[-1], "norm_growth": norms[-1] / norms[0],
            "angle_early": mean(angles[:k]), "angle_late": mean(angles[-k:]),
            "angle_late_over_early": mean(angles[-k:]) / mean(angles[:k]),
            "eff_lr_early": mean(eff[:k]), "eff_lr_late": mean(eff[-k:]),
            "eff_lr_exponent_vs_norm": fit_exponent(n_eff, eff)
            if max(n_eff) > 1.01 * min(n_eff) else None,
            "mean_abs_cos_grad_w": mean([abs(c) for c in cos])})
    return {"layers": layers,
            "fisher_decay_last": log["probe_fisher"][-1] / log["probe_fisher_at_norm0"][-1],
            "fisher_decay_exponent": _decay_exponent(log),
            "rescaled_logp_change_max": max(log["probe_logp_change_at_norm0"]), "loss_first": log["loss"][0],
            "loss_last": sum(log["loss"][-10:]) / len(log["loss"][-10:])}


def measure_training(x: torch.Tensor, y: torch.Tensor, *, steps: int = 300, seed: int = 0,
                     progress: bool = False) -> dict:
    """Point 2 for every (norm in TRAIN_NORMS, optimizer in OPTIMIZERS)."""
    runs = {}
    for norm in TRAIN_NORMS:
        for opt in OPTIMIZERS:
            runs[f"{norm}/{opt}"] = train_mlp(x, y, norm=norm, optimizer=opt, steps=steps,
                                              seed=seed, progress=progress)
    return runs


# --------------------------------------------------------------------------- figures

def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _save(fig, path: Path) -> str:
    import io
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    _plt().close(fig)
    atomic_write_bytes(path, buf.getvalue())
    return str(path)


def plot_curvature(curv: dict, path: Path) -> str:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    scales = curv["scales"]
    for method, r in curv["methods"].items():
        q = r[r["main"]]["quadratic_form"]
        q1 = q[scales.index(1.0)]
        what = "w_i" if r["main"] == "w_i" else "W"
        ax.loglog(scales, [v / q1 for v in q], "o-", label=f"{METHOD_NAMES[method]} "
                  f"(scale {what}): slope {r['exponent']:+.3f}")
    ax.loglog(scales, [d ** -2 for d in scales], "k--", lw=1, label="d^-2")
    _log_ticks(ax, scales)
    ax.set_xlabel("scale d of the incoming weights")
    ax.set_ylabel("Fisher quadratic form along w_i, relative to d = 1")
    ax.set_title("Curvature vs weight norm (softmax GLM on digits)")
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_training(runs: dict, path: Path) -> str:
    plt = _plt()
    fig, axes = plt.subplots(1, 4, figsize=(19, 4.4))
    for name, run in runs.items():
        log = run["log"]
        style = "-" if run["norm"] == "layer" else ":"
        label = f"{'LN' if run['norm'] == 'layer' else 'no norm'} + {run['optimizer']}"
        norms, angles = log["norm"][0], log["angle"][0]
        eff = [a / (n * g) for a, n, g in zip(angles, norms, log["grad_norm"][0])]
        axes[0].plot(norms, style, label=label)
        axes[1].semilogy(_smooth(angles), style, label=label)
        axes[2].loglog(norms, eff, style, label=label)
        n0 = log["probe_norm"][0]
        axes[3].loglog([n / n0 for n in log["probe_norm"]],
                       [a / b for a, b in zip(log["probe_fisher"], log["probe_fisher_at_norm0"])],
                       style + "o", ms=3, label=label)
    axes[0].set_xlabel("step")
    axes[0].set_ylabel("||W_1|| (first hidden layer)")
    axes[1].set_xlabel("step")
    axes[1].set_ylabel("angular step of W_1 (rad, smoothed)")
    axes[2].set_xlabel("||W_1||")
    axes[2].set_ylabel("effective lr  angle / (||W_1|| ||grad||)")
    axes[3].set_xlabel("||W_1|| / ||W_1 at step 0||")
    axes[3].set_ylabel("u'F(W_1)u / u'F(W_1 rescaled to initial norm)u")
    from matplotlib.ticker import NullFormatter
    top = max(max(r["log"]["probe_norm"]) / r["log"]["probe_norm"][0] for r in runs.values())
    axes[3].loglog([1, top], [1, top ** -2], "k--", lw=1, label="(||W_1|| / ||W_1 at 0||)^-2")
    for ax in axes:
        ax.legend(fontsize=8)
        ax.xaxis.set_minor_formatter(NullFormatter())
    fig.suptitle("Implicit learning-rate decay: MLP on digits, with and without layer norm")
    fig.subplots_adjust(wspace=0.38)
    return _save(fig, path)


def _log_ticks(ax, scales) -> None:
    """Label the powers of two of a log x-axis only (the default minor labels overlap)."""
    from matplotlib.ticker import NullFormatter
    ticks = [d for d in scales if abs(math.log2(d) - round(math.log2(d))) < 1e-9]
    ax.set_xticks(ticks, [f"{d:g}" for d in ticks])
    ax.xaxis.set_minor_formatter(NullFormatter())


def _smooth(v: list[float], k: int = 10) -> list[float]:
    out, acc = [], 0.0
    for i, a in enumerate(v):
        acc += a - (v[i - k] if i >= k else 0.0)
        out.append(acc / min(i + 1, k))
    return out


def plot_gain(gain: dict, path: Path) -> str:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    for method, r in gain["methods"].items():
        ax.loglog(gain["scales"], r["ratio"], "o-", label=f"{METHOD_NAMES[method]}: slope "
                  f"{r['exponent']:+.3f}")
    _log_ticks(ax, gain["scales"])
    ax.set_xlabel("input scale lambda (x -> lambda x)")
    ax.set_ylabel("metric along the gains, relative to lambda = 1")
    ax.set_title("Gain learning under input re-scaling (eqs. 32-35)")
    ax.legend(fontsize=8)
    return _save(fig, path)


# --------------------------------------------------------------------------- entry points

def run_geometry(out_dir: str | os.PathLike, *, methods=METHODS, scales=SCALES,
                 n_examples: int = 256, steps: int = 300, data: torch.Tensor | None = None,
                 labels: torch.Tensor | None = None, seed: int = 0, progress: bool = False) -> dict:
    """All three measurements on the digits (or ``data``/``labels``); writes ``geometry.json`` and
    ``curvature.png``, ``training.png``, ``gain.png`` into ``out_dir`` and returns the JSON dict.

    n_examples: examples in the Fisher expectation (float64); steps: SGD/Adam steps per training
    run. The defaults take a few seconds.
    """
    with single_thread():
        return _run_geometry(out_dir, methods=methods, scales=scales, n_examples=n_examples,
                             steps=steps, data=data, labels=labels, seed=seed, progress=progress)


def _run_geometry(out_dir, *, methods, scales, n_examples, steps, data, labels, seed,
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
    result = {
        "curvature": curv, "gain": gain,
        "training": runs,
        "figures": {"curvature": plot_curvature(curv, out / "curvature.png"),
                    "training": plot_training(runs, out / "training.png"),
                    "gain": plot_gain(gain, out / "gain.png")},
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
        "by, cos(grad, W1) (0: the loss ignores ||W1||), effective lr = angle / (||W1|| ||grad||) "
        "(SGD: lr / ||W1||^2);",
        "   every 10 steps the Fisher form u'Fu along a tangent u at W1 over the same at W1 "
        "rescaled to its initial norm ('Fisher decay': same step, how much less the prediction "
        "moves), with the",
        "   log-log exponent against ||W1|| / ||W1_0|| and the largest change of log p that "
        "rescaling causes (0 under LN: the same function, so the decay is purely implicit).",
        format_table(trows, list(trows[0])),
        "",
        f"Files: {', '.join(result['figures'].values())} and geometry.json",
    ])


def _run(args: argparse.Namespace) -> int:
    from .._io import clean_stale_temp_files, exclusive_lock, output_dir
    out = output_dir(args.out)
    with exclusive_lock(out / ".geometry.lock", f"another `layernorm geometry` (pid {{pid}}) is "
                        f"writing {out} right now; wait for it, or pass another --out."):
        clean_stale_temp_files(out)      # atomic writes cut short by a kill
        result = run_geometry(out, methods=args.methods, steps=args.steps,
                              n_examples=args.examples, seed=args.seed, progress=True)
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
    p.set_defaults(func=_run)

"""Implicit learning-rate decay (paper section 5.2, "Learning the magnitude of incoming weights";
docs/paper.md section 4): an MLP with and without layer norm trained with SGD and Adam, logging
per step the weight norms, the angular step and the effective learning rate, and every few steps
the exact Fisher form along a tangent direction. Point 2 of ``layernorm_paper.analysis.geometry``.
"""
from __future__ import annotations

import torch
from torch import nn
from tqdm import tqdm

from ..models.mlp import mlp_layers
from .fisher import _load_forward_ad, fit_exponent
from .layer import check_data, single_thread

TRAIN_NORMS = ("layer", "none")
OPTIMIZERS = {"sgd": 0.5, "adam": 0.01}                         # optimizer -> learning rate


def _mlp(norm: str, sizes: tuple[int, ...], seed: int) -> nn.Sequential:
    """``models.mlp``'s MLP through the widths ``sizes``, with no bias before a norm (it would be
    removed by the centering) and plain Linear logits (never normalized, as in the paper)."""
    torch.manual_seed(seed)
    return nn.Sequential(*mlp_layers(sizes[0], sizes[1:-1], sizes[-1], norm, bias=norm == "none"))


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
    hidden_weights = [m.weight for m in model.modules() if isinstance(m, nn.Linear)][:-1]
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

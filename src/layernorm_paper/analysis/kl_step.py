"""The length of each update in function space (paper section 5.2, "implicit learning-rate decay";
docs/paper.md section 4, docs/analysis.md).

Section 5.2's argument is about the model's output distribution, not its parameters: the Fisher
metric ``ds^2 = KL(p(y|x; theta) || p(y|x; theta + delta))`` of a normalized layer scales as
``1 / sigma^2``, so as ||W|| grows the same parameter step moves the prediction less (the
normalization scalar sigma "implicitly reduces the learning rate"). This module measures exactly
that during training: per update t

    KL_t = mean over a fixed probe batch x of KL(p(. | x; theta_t) || p(. | x; theta_{t+1}))

(float64, the probe held apart from the training examples and the same for every arm and seed),
with ||W|| of every hidden weight matrix (the layers layer norm normalizes) and the angle the first
one turns by. The decay is read per seed as late / early: the updates after a warm-up (the first
quarter of them, ``WARMUP_FRACTION``) are cut in quarters, and the mean KL over the last quarter
is divided by the mean over the first (``windows``). A network without normalization slows down
too as its loss falls, so what section 5.2 credits to normalization is a decay beyond that one (``report.claims.checks.claim_lr_decay`` compares the two arms, paired by seed).

    probe_split(n, probe_size)               -> (train indices, probe indices), fixed
    probe_logp(model, x_probe)               -> log p(y | x) in float64, (N, K)
    kl_mean(logp, logq)                      -> mean_x KL(p || q)
    train_kl_steps(x, y, x_probe, norm=...)  -> one run: per-update KL, ||W||, angle, summary
    measure_kl_steps(x, y, seeds=..., ...)   -> both arms over seeds (``geometry.json["kl_step"]``)
"""
from __future__ import annotations

import math

import torch
from torch import nn
from tqdm import tqdm

from .layer import check_data, single_thread
from .weight_growth import OPTIMIZERS, _angle, _mlp

KL_NORMS = ("layer", "none")          # the two arms: layer norm on the hidden layers, or nothing
KL_OPTIMIZER = "sgd"                  # plain SGD: the update is lr x the gradient (section 5.2)
KL_SEEDS = 50                         # seeds per arm (one run of 200 updates: about 0.35 CPU-s);
#                                       the spread of late / early over seeds is wide, and 20
#                                       seeds left the interval wider than the margin
PROBE_SIZE = 256                      # examples of the fixed probe batch, held out of training
PROBE_SEED = 1234                     # the probe's draw: fixed, independent of the training seeds
WARMUP_FRACTION = 0.25                # updates left out before the "early" window: the network
#                                       without normalization starts with far smaller steps
#                                       (small initial logits) and takes tens of updates to reach
#                                       its full step length (kl_step.png); an early window on
#                                       that ramp would credit its slow start to layer norm
NORM_EVERY = 5                        # ||W|| logged every 5 updates (it changes slowly)
LOG_DIGITS = 6                        # significant digits of the logged series in the JSON


def probe_split(n: int, probe_size: int = PROBE_SIZE) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed random split of ``n`` examples: (training indices, probe indices). The same for
    every arm and seed, so every run is measured on the same probe, which it never trains on."""
    if not 1 <= probe_size <= n - 2:
        raise ValueError(f"probe_split expected 1 <= probe_size <= n - 2 = {n - 2} (the rest is "
                         f"the training set), received probe_size {probe_size} for n = {n}. "
                         f"Pass a smaller probe_size or more data.")
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(PROBE_SEED))
    return perm[probe_size:].sort().values, perm[:probe_size].sort().values


@torch.no_grad()
def probe_logp(model: nn.Module, x_probe: torch.Tensor) -> torch.Tensor:
    """log p(y | x) of ``model`` on the probe, computed in float64 (a copy of the parameters), so
    that the tiny KL of one update is not lost to float32 rounding of the log-probabilities."""
    params = {n: p.detach().double() for n, p in model.named_parameters()}
    buffers = {n: b.detach().double() if b.is_floating_point() else b
               for n, b in model.named_buffers()}
    logits = torch.func.functional_call(model, {**params, **buffers}, (x_probe.double(),))
    return logits.log_softmax(-1)


def kl_mean(logp: torch.Tensor, logq: torch.Tensor) -> float:
    """mean over the rows x of KL(p(.|x) || q(.|x)) = sum_y p(y|x) (log p(y|x) - log q(y|x)), from
    log-probabilities (N, K); 0 * log 0 = 0. Rounding can leave a KL of ~1e-17 below 0: clamped."""
    if logp.shape != logq.shape or logp.dim() != 2:
        raise ValueError(f"kl_mean expected two (N, K) log-probability tensors of one shape, "
                         f"received {tuple(logp.shape)} and {tuple(logq.shape)}.")
    p = logp.exp()
    terms = torch.where(p > 0, p * (logp - logq), torch.zeros_like(p))
    return max(float(terms.sum(-1).mean()), 0.0)


def windows(steps: int) -> dict:
    """The update ranges [start, stop) the decay compares: a warm-up of WARMUP_FRACTION of the
    updates left out, then the first and the last quarter of the remaining updates."""
    if steps < 2:
        raise ValueError(f"windows expected at least 2 updates, received {steps}.")
    warm = int(steps * WARMUP_FRACTION)
    q = max((steps - warm) // 4, 1)
    return {"warmup": warm, "early": [warm, warm + q], "late": [steps - q, steps]}


def _mean(v) -> float:
    return sum(v) / len(v)


@single_thread()
def train_kl_steps(x: torch.Tensor, y: torch.Tensor, x_probe: torch.Tensor, *, norm: str,
                   steps: int = 300, seed: int = 0, optimizer: str = KL_OPTIMIZER,
                   lr: float | None = None, batch_size: int = 32, hidden: int = 64,
                   depth: int = 2, progress: bool = False) -> dict:
    """Train ``weight_growth``'s MLP (``norm`` on the hidden layers, never on the logits) on
    (x, y) and record, for every update t, KL(p_t || p_{t+1}) averaged over ``x_probe``, the norm
    of every hidden weight matrix before the update and the angle the first one turns by (in the
    summary only); at the end the loss over all of (x, y). The summary is computed from the full
    precision values; the logged series keep ``LOG_DIGITS`` significant digits and ||W|| every
    ``NORM_EVERY`` updates (``log["norm_update"]``: the updates it was logged before)."""
    check_data(x, "train_kl_steps(x=...)")
    check_data(x_probe, "train_kl_steps(x_probe=...)", min_examples=1)
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; expected one of {sorted(OPTIMIZERS)}.")
    if steps < 2:
        raise ValueError(f"train_kl_steps expected steps >= 2 (an early and a late update), "
                         f"received {steps}.")
    if norm not in KL_NORMS:
        raise ValueError(f"train_kl_steps expected norm in {KL_NORMS}, received {norm!r}.")
    lr = OPTIMIZERS[optimizer] if lr is None else lr
    classes = int(y.max()) + 1
    sizes = (x.shape[1],) + (hidden,) * depth + (classes,)
    model = _mlp(norm, sizes, seed)
    weights = [m.weight for m in model.modules() if isinstance(m, nn.Linear)][:-1]
    opt = (torch.optim.SGD if optimizer == "sgd" else torch.optim.Adam)(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    log = {"kl": [], "norm": [[] for _ in weights], "norm_update": []}
    norms, angles = [[] for _ in weights], []
    lp = probe_logp(model, x_probe)
    for t in tqdm(range(steps), desc=f"KL steps {norm}/{optimizer} seed {seed}", leave=False,
                  disable=not progress):
        idx = torch.randint(0, x.shape[0], (batch_size,), generator=gen)
        loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        w0 = weights[0].detach().clone()
        for k, w in enumerate(weights):
            norms[k].append(float(w.detach().norm()))
        opt.step()
        lq = probe_logp(model, x_probe)
        log["kl"].append(kl_mean(lp, lq))
        angles.append(_angle(w0, weights[0].detach()))
        lp = lq
    with torch.no_grad():
        final = float(nn.functional.cross_entropy(model(x), y))
    summary = summarize({**log, "norm": norms, "angle": angles}, steps)
    keep = sorted(set(range(0, steps, NORM_EVERY)) | {steps - 1})
    log["norm_update"] = keep
    log["norm"] = [[_round(n[t]) for t in keep] for n in norms]
    log["kl"] = [_round(v) for v in log["kl"]]
    return {"norm": norm, "optimizer": optimizer, "lr": lr, "steps": steps, "seed": seed,
            "sizes": list(sizes), "batch_size": batch_size, "classes": classes,
            "final_train_loss": final, "log": log, "summary": summary}


def _round(v: float) -> float:
    return float(f"{v:.{LOG_DIGITS}g}")


def summarize(log: dict, steps: int) -> dict:
    """Early vs late (``windows``): the mean per-update KL, its ratio late / early (and its log),
    the same for the angular step, and the growth of every hidden layer's ||W||."""
    win = windows(steps)
    (a, b), (c, d) = win["early"], win["late"]
    kl_e, kl_l = _mean(log["kl"][a:b]), _mean(log["kl"][c:d])
    an_e, an_l = _mean(log["angle"][a:b]), _mean(log["angle"][c:d])
    ratio = kl_l / kl_e if kl_e > 0 else None
    return {"windows": win, "kl_early": kl_e, "kl_late": kl_l, "kl_late_over_early": ratio,
            "log_kl_late_over_early": math.log(ratio) if ratio else None,
            "angle_early": an_e, "angle_late": an_l,
            "angle_late_over_early": an_l / an_e if an_e > 0 else None,
            "norm_first": [n[0] for n in log["norm"]], "norm_last": [n[-1] for n in log["norm"]],
            "norm_growth": [n[-1] / n[0] for n in log["norm"]]}


def measure_kl_steps(x: torch.Tensor, y: torch.Tensor, *, steps: int = 300, seeds=KL_SEEDS,
                     probe_size: int = PROBE_SIZE, optimizer: str = KL_OPTIMIZER,
                     progress: bool = False) -> dict:
    """Both arms (``KL_NORMS``) over ``seeds`` (a count, or the seeds themselves), trained on the
    same examples and measured on the same held-out probe (``probe_split``); the arms of one
    seed start from the same initial weights and see the same minibatches."""
    check_data(x, "measure_kl_steps(x=...)")
    if y.shape != (x.shape[0],):
        raise ValueError(f"measure_kl_steps expected labels of shape ({x.shape[0]},), received "
                         f"{tuple(y.shape)}. Pass one integer class per example.")
    seeds = list(range(seeds)) if isinstance(seeds, int) else [int(s) for s in seeds]
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"measure_kl_steps expected one or more distinct seeds, received "
                         f"{seeds}.")
    probe_size = min(probe_size, x.shape[0] // 2)
    tr, pr = probe_split(x.shape[0], probe_size)
    xt, yt, xp = x[tr], y[tr], x[pr]
    runs: dict[str, list] = {norm: [] for norm in KL_NORMS}
    for norm, s in tqdm([(n, s) for n in KL_NORMS for s in seeds], desc="KL-step runs",
                        leave=False, disable=not progress):
        runs[norm].append(train_kl_steps(xt, yt, xp, norm=norm, steps=steps, seed=s,
                                         optimizer=optimizer))
    return {"steps": steps, "seeds": seeds, "optimizer": optimizer,
            "lr": runs[KL_NORMS[0]][0]["lr"], "sizes": runs[KL_NORMS[0]][0]["sizes"],
            "batch_size": runs[KL_NORMS[0]][0]["batch_size"], "probe_size": int(pr.numel()),
            "train_size": int(tr.numel()), "classes": int(y.max()) + 1,
            "windows": windows(steps), "runs": runs}

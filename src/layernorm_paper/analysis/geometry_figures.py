"""The three figures of ``layernorm_paper.analysis.geometry`` (matplotlib, Agg): curvature vs weight
norm, implicit learning-rate decay, and the gain metric under input re-scaling."""
from __future__ import annotations

import math
from pathlib import Path

from .._io import atomic_write_bytes
from .layer import METHOD_NAMES


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
    axes[2].set_ylabel("angle / (||W_1|| ||grad||)  (SGD: lr sin / ||W_1||², any network)")
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


def _inside_title(ax, text: str) -> None:
    """The panel's title drawn inside its frame (top centre, on a white box), so that it travels
    with the plot wherever the figure is cropped or embedded."""
    ax.text(0.5, 0.97, text, transform=ax.transAxes, ha="center", va="top", fontsize=9,
            bbox={"facecolor": "white", "edgecolor": "0.7", "alpha": 0.9, "pad": 3})


def plot_kl_steps(kl: dict, path: Path) -> str:
    """Per-update KL(p_t || p_t+1) on the probe against the update (log y), both arms, mean over
    seeds (thin: every update; thick: a running mean over 10 updates), the early and late windows
    shaded; and ||W|| of each hidden layer, mean over seeds."""
    plt = _plt()
    fig, (a0, a1) = plt.subplots(1, 2, figsize=(12.5, 4.6))
    colors = {"layer": "C0", "none": "C3"}
    n_seeds = len(kl["seeds"])
    for norm, runs in kl["runs"].items():
        label = "LN" if norm == "layer" else "no norm"
        steps = len(runs[0]["log"]["kl"])
        mean_kl = [sum(r["log"]["kl"][t] for r in runs) / len(runs) for t in range(steps)]
        upd = list(range(1, steps + 1))
        a0.semilogy(upd, mean_kl, color=colors.get(norm), lw=0.5, alpha=0.35)
        a0.semilogy(upd, _smooth(mean_kl), color=colors.get(norm), lw=2,
                    label=f"{label} (mean of {len(runs)} seeds; running mean over 10)")
        at = runs[0]["log"]["norm_update"]                  # ||W|| after that many updates
        for k in range(len(runs[0]["log"]["norm"])):
            mean_w = [sum(r["log"]["norm"][k][i] for r in runs) / len(runs)
                      for i in range(len(at))]
            a1.plot(at, mean_w, color=colors.get(norm), ls="-" if k == 0 else "--",
                    label=f"{label}: ||W_{k + 1}||")
    w = kl["windows"]
    for (lo, hi), what in ((w["early"], "early"), (w["late"], "late")):
        a0.axvspan(lo + 1, hi, color="0.85", zorder=0)
        a0.text((lo + hi) / 2 + 1, 0.03, what, transform=a0.get_xaxis_transform(), ha="center",
                fontsize=8, color="0.3")
    a0.set_xlabel("update t")
    a0.set_ylabel("KL(p_t || p_t+1), mean over the probe (nats)")
    _inside_title(a0, f"Step length in function space ({kl['optimizer'].upper()} lr "
                      f"{kl['lr']:g}, {n_seeds} seeds, {kl['probe_size']} probe digits)")
    a0.legend(fontsize=8, loc="lower left", bbox_to_anchor=(0.0, 0.08))
    a1.set_xlabel("updates made")
    a1.set_ylabel("||W|| of the hidden layers (mean over seeds)")
    _inside_title(a1, "Weight norm of the layers LN normalizes")
    a1.legend(fontsize=8, loc="lower right")
    a1.set_ylim(top=a1.get_ylim()[1] * 1.12)      # room for the title inside the frame
    a0.set_ylim(top=a0.get_ylim()[1] * 8)
    fig.subplots_adjust(wspace=0.25)
    return _save(fig, path)

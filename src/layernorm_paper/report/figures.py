"""The report's figures (matplotlib, Agg): ``draw(figure, inputs, path)`` for the ``Figure``s the
claims ask for. Nothing here decides a verdict."""
from __future__ import annotations

import io
import math
from pathlib import Path

from .._io import atomic_write_bytes
from .claims import Figure
from .claims.order import F_SELECT, ORDER_LABEL, RECALLS, best_step
from .scoring import (F_ERROR, F_ERROR_FAIR, F_HIDDEN_MEAN, F_HIDDEN_STD, F_TRAIN_LOSS,
                      F_TRAIN_NLL, NORM_LABEL, PP, RNN_LABEL, RNN_NORMS, _num, ema_key, error_key,
                      fair_key, score)
from .runs import Inputs, Run, select

COLORS = {"none": "tab:gray", "batch": "tab:blue", "batch-all": "tab:cyan", "layer": "tab:red",
          "weight": "tab:green", "rms": "tab:purple"}


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _norms_present(runs, order=("none", "batch", "batch-all", "layer", "weight", "rms")):
    have = {r.variant for r in runs}
    return [n for n in order if n in have]


def _batches_present(runs):
    return sorted({r.batch_size for r in runs}, reverse=True)


def _over_seeds(ys: list[list[float]]) -> tuple[list[float], list[float]]:
    """Mean and standard deviation over seeds at each evaluation (``ys[i]``: one value a seed)."""
    mean = [sum(v) / len(v) for v in ys]
    std = [math.sqrt(sum((a - m) ** 2 for a in v) / max(len(v) - 1, 1)) for v, m in zip(ys, mean)]
    return mean, std


def _mean_std_curve(runs: list[Run], xkey: str, ykey: str, bad: float):
    n = min(len(r.rows) for r in runs)
    xs = [float(runs[0].rows[i].get(xkey, i)) for i in range(n)]
    return (xs,) + _over_seeds([[_num(r.rows[i].get(ykey), bad) for r in runs] for i in range(n)])


def _make_room(fig) -> None:
    """For every panel titled inside its frame: headroom above the data for the title, the
    legend kept below it, and plain numbers (not powers of ten) on a log axis."""
    import math as _m

    from matplotlib.ticker import FuncFormatter
    for ax in fig.axes:
        lo, hi = ax.get_ylim()
        log = ax.get_yscale() == "log" and lo > 0
        if log:
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.yaxis.set_minor_formatter(FuncFormatter(
                lambda v, _: f"{v:g}" if f"{v:.1e}"[0] in "25" else ""))
        if not getattr(ax, "_title_inside", False):
            continue
        if log:
            ax.set_ylim(lo, hi * (hi / lo) ** 0.15)
        elif _m.isfinite(hi - lo):
            ax.set_ylim(lo, hi + 0.15 * (hi - lo))
        leg = ax.get_legend()
        if leg is not None:
            leg.set_bbox_to_anchor((0, 0, 1, 0.88), transform=ax.transAxes)


def _save(fig, path: Path) -> None:
    _make_room(fig)
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=110)
    _plt().close(fig)
    atomic_write_bytes(path, buf.getvalue())


def _inside(ax, title: str) -> None:
    """A panel's title inside its frame (top left, on a white box), not above it where a row of
    panels and the figure's title would crowd it."""
    ax.set_title(title, y=1.0, pad=-14, fontsize=9, loc="left",
                 bbox=dict(facecolor="white", alpha=0.8, edgecolor="none", pad=1.5))
    ax._title_inside = True


def _suptitle(fig, title: str, width: int = 100) -> None:
    """The figure's title, wrapped to the figure's width so it stays within the image."""
    import textwrap
    fig.suptitle("\n".join(textwrap.wrap(title, width)), fontsize=10)


def _log_if_positive(ax, values) -> None:
    """A loss on a log scale (the arms differ by factors late in training), where every value
    drawn is positive; a loss that can be negative (a density's NLL) stays linear."""
    vals = [v for v in values if v == v]
    if vals and min(vals) > 0:
        ax.set_yscale("log")


def _finish(fig, axes, path: Path, title: str, legend: int = 8) -> None:
    """Grid and legend on every panel, the figure's title, saved to ``path``."""
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=legend)
    _suptitle(fig, title)
    _save(fig, path)


def _band(ax, xs, mean, std, **kw):
    line, = ax.plot(xs, mean, **kw)
    ax.fill_between(xs, [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)],
                    color=line.get_color(), alpha=0.15, linewidth=0)


def _loss_key(runs: list[Run]) -> tuple[str, str]:
    if all(r.rows and all(row.get(F_TRAIN_NLL) is not None for row in r.rows) for r in runs):
        return F_TRAIN_NLL, "train NLL, eval mode (nats)"
    return F_TRAIN_LOSS, "train loss, running mean in train mode"


def ff_curves(runs: list[Run], path: Path, title: str) -> None:
    plt = _plt()
    batches = _batches_present(runs)
    lkey, llabel = _loss_key(runs)
    fig, axes = plt.subplots(2, len(batches), figsize=(4.2 * len(batches), 6.5), squeeze=False)
    for j, b in enumerate(batches):
        for n in _norms_present(runs):
            rs = select(runs, variant=n, batch_size=b)
            if not rs:
                continue
            for i, (key, bad) in enumerate(((lkey, float("nan")), (error_key(rs), 1.0))):
                xs, m, s = _mean_std_curve(rs, "step", key, bad)
                scale = 1.0 if i == 0 else PP
                _band(axes[i][j], xs, [v * scale for v in m], [v * scale for v in s],
                      label=NORM_LABEL.get(n, n), color=COLORS.get(n))
        _inside(axes[0][j], f"{title}, batch size {b}")
        axes[0][j].set_ylabel(llabel)
        axes[0][j].set_yscale("log")
        axes[1][j].set_ylabel("test error (%)")
        for i in range(2):
            axes[i][j].set_xlabel("update")
            axes[i][j].grid(alpha=0.3)
        axes[1][j].legend(fontsize=8)
    _suptitle(fig, f"{title}: training curves (mean ± std over seeds; BN test error with "
                   f"population statistics where measured)")
    _save(fig, path)


def error_bars(runs: list[Run], path: Path, title: str) -> None:
    plt = _plt()
    norms, batches = _norms_present(runs), _batches_present(runs)
    fig, ax = plt.subplots(figsize=(1.6 + 1.4 * len(norms) * len(batches) / 2, 4))
    width = 0.8 / len(batches)
    for j, b in enumerate(batches):
        ms, ss = [], []
        for n in norms:
            rs = select(runs, variant=n, batch_size=b)
            vals = [score(r, error_key(rs)) * PP for r in rs]
            ms.append(sum(vals) / len(vals) if vals else float("nan"))
            ss.append(math.sqrt(sum((v - ms[-1]) ** 2 for v in vals) / max(len(vals) - 1, 1))
                      if vals else 0)
        xs = [i + (j - (len(batches) - 1) / 2) * width for i in range(len(norms))]
        ax.bar(xs, ms, width, yerr=ss, capsize=3, label=f"batch {b}", alpha=0.85)
    ax.set_xticks(range(len(norms)), [NORM_LABEL.get(n, n) for n in norms])
    ax.set_ylabel("test error (%), mean of the last evaluations")
    _inside(ax, f"{title}: test error vs batch size (mean ± std over seeds)")
    ax.legend(title="batch size")
    ax.grid(axis="y", alpha=0.3)
    _save(fig, path)


def rnn_curves(runs: list[Run], path: Path, title: str) -> None:
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for n in RNN_NORMS:
        rs = select(runs, norm=n)
        if not rs:
            continue
        for ax, (key, bad, scale) in zip(axes, ((F_TRAIN_LOSS, float("nan"), 1.0),
                                                 (error_key(rs), 1.0, PP))):
            xs, m, s = _mean_std_curve(rs, "step", key, bad)
            _band(ax, xs, [v * scale for v in m], [v * scale for v in s], label=RNN_LABEL[n]
                  + (", population statistics" if key == F_ERROR_FAIR and n == "batch" else ""),
                  color=COLORS[n])
        if n == "batch" and error_key(rs) == F_ERROR_FAIR:     # BN's EMA score beside it
            xs, m, _ = _mean_std_curve(rs, "step", ema_key(rs), 1.0)
            axes[1].plot(xs, [v * PP for v in m], "--", color=COLORS[n],
                         label=f"{RNN_LABEL[n]}, running averages (EMA)")
    axes[0].set_ylabel("train loss (running mean, train mode)")
    _log_if_positive(axes[0], [y for line in axes[0].get_lines() for y in line.get_ydata()])
    axes[1].set_ylabel("test error (%)")
    for ax in axes:
        ax.set_xlabel("training step")
    _finish(fig, axes, path, f"{title} (mean ± std over seeds)")


def hidden(runs: list[Run], path: Path, title: str) -> None:
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    for n in RNN_NORMS:
        rs = [r for r in select(runs, norm=n) if r.rows[-1].get(F_HIDDEN_STD)]
        if not rs:
            continue
        c = COLORS[n]
        for idx, style, when in ((0, ":", "first eval"), (-1, "-", "last eval")):
            rows = [[r for r in run.rows if r.get(F_HIDDEN_STD)][idx] for run in rs]
            T = min(len(r[F_HIDDEN_STD]) for r in rows)
            std = [sum(float(r[F_HIDDEN_STD][t]) for r in rows) / len(rows) for t in range(T)]
            axes[0].plot(range(T), std, style, color=c, label=f"{RNN_LABEL[n]}, {when}")
            if all(r.get(F_HIDDEN_MEAN) for r in rows):
                mean = [sum(float(r[F_HIDDEN_MEAN][t]) for r in rows) / len(rows)
                        for t in range(T)]
                axes[1].plot(range(T), mean, style, color=c, label=f"{RNN_LABEL[n]}, {when}")
        n_ev = min(len([r for r in run.rows if r.get(F_HIDDEN_STD)]) for run in rs)
        steps = [[r for r in rs[0].rows if r.get(F_HIDDEN_STD)][i]["step"] for i in range(n_ev)]
        avg = []
        for i in range(n_ev):
            vals = []
            for run in rs:
                h = [r for r in run.rows if r.get(F_HIDDEN_STD)][i][F_HIDDEN_STD]
                vals.append(sum(map(float, h)) / len(h))
            avg.append(vals)
        _band(axes[2], steps, *_over_seeds(avg), color=c, label=RNN_LABEL[n])
    axes[0].set(xlabel="time step t", ylabel="std of h_t (over batch and units)")
    _inside(axes[0], "spread of h_t along the sequence")
    axes[0].set_yscale("log")
    axes[1].set(xlabel="time step t", ylabel="mean of h_t")
    _inside(axes[1], "mean of h_t along the sequence")
    axes[2].set(xlabel="training step", ylabel="time-averaged std of h_t")
    _inside(axes[2], "spread of h_t over training")
    _finish(fig, axes, path, f"{title} (mean over seeds; dotted: first evaluation, solid: last)",
            legend=7)


def gain(runs: list[Run], path: Path, title: str) -> None:
    better, worse = (float(v) for v in title.split(","))
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.8))
    for g, c in ((better, "tab:red"), (worse, "tab:orange")):
        rs = [r for r in runs if float(r.arg("gain_init", 1.0)) == g]
        if not rs:
            continue
        xs, m, s = _mean_std_curve(rs, "step", F_ERROR, 1.0)
        _band(ax, xs, [v * PP for v in m], [v * PP for v in s], color=c, label=f"gain init {g}")
    ax.set(xlabel="training step", ylabel="test error (%)")
    _inside(ax, "LN-LSTM: gain initialisation (mean ± std over seeds)")
    ax.grid(alpha=0.3)
    ax.legend()
    _save(fig, path)


def paper_curves(runs: list[Run], path: Path, title: str) -> None:
    """A section 6 experiment's curve per arm (mean ± std over seeds); ``title`` is
    "key|scale|what|xkey" (the claim's ``LossSpec``), with "|y" a dotted reference line at y
    (chance). A BN arm scored on test_loss is drawn with population statistics where its runs
    carry them, its running averages (EMA) dashed beside."""
    key, scale, what, xkey, *ref = title.split("|")
    scale = float(scale)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 4))
    for n in RNN_NORMS:
        rs = select(runs, norm=n)
        if not rs:
            continue
        k = fair_key(rs, key)
        xs, m, s = _mean_std_curve(rs, xkey, k, float("nan"))
        _band(ax, xs, [v * scale for v in m], [v * scale for v in s],
              label=f"{RNN_LABEL[n]} ({len(rs)} seeds)" + (", population statistics"
                                                           if k != key else ""), color=COLORS[n])
        if k != key:
            xs, m, _ = _mean_std_curve(rs, xkey, key, float("nan"))
            ax.plot(xs, [v * scale for v in m], "--", color=COLORS[n],
                    label=f"{RNN_LABEL[n]}, running averages (EMA)")
    if ref:
        ax.axhline(float(ref[0]), color="k", linestyle=":", linewidth=1, label="chance")
    exp = runs[0].experiment
    ax.set(xlabel="epoch" if xkey == "epoch" else "update", ylabel=what)
    if not ref:                     # a loss (a reference line marks an accuracy's chance)
        _log_if_positive(ax, [y for line in ax.get_lines() for y in line.get_ydata()])
    _inside(ax, f"{exp}: {what} (mean ± std over seeds)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    _save(fig, path)


def order_curves(runs: list[Run], path: Path, title: str) -> None:
    """Order embeddings: validation R-sum (the model-selection criterion, with each arm's mean
    update count to its best validation model dotted) and the test recalls' mean, per caption
    encoder (mean ± std over seeds)."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for n, label in ORDER_LABEL.items():
        rs = select(runs, norm=n)
        if not rs:
            continue
        n_ev = min(len(r.rows) for r in rs)
        xs = [float(rs[0].rows[i]["step"]) for i in range(n_ev)]
        for ax, fn in ((axes[0], lambda row: _num(row.get(F_SELECT), float("nan"))),
                       (axes[1], lambda row: sum(_num(row.get(f"test_{k}"), float("nan"))
                                                 for k in RECALLS) / len(RECALLS))):
            _band(ax, xs, *_over_seeds([[fn(r.rows[i]) for r in rs] for i in range(n_ev)]),
                  color=COLORS[n], label=f"{label} ({len(rs)} seeds)")
        axes[0].axvline(sum(best_step(r) for r in rs) / len(rs), color=COLORS[n], linestyle=":",
                        linewidth=1)
    axes[0].set(xlabel="update", ylabel="validation R-sum (image retrieval R@1+R@5+R@10)")
    _inside(axes[0], "model selection (dotted: mean update of the best model)")
    axes[1].set(xlabel="update", ylabel="test recall, mean of R@1 and R@10 (%)")
    _inside(axes[1], "caption and image retrieval")
    _finish(fig, axes, path, f"{title} (mean ± std over seeds)")


PANEL_ROWS = 30    # the forest plot's rows in two panels up to this many claims, three above


def forest(rows: list[dict], path: Path) -> None:
    """Every claim's interval in units of its boundary (``front.forest_rows``): a row per claim,
    its boundary (or band) as dashed lines, the verdict as colour (the caption says which),
    borderline hollow; the rows in two or three panels side by side (the front page's space)."""
    plt = _plt()
    colors = {"supported": "tab:green", "not supported": "tab:red"}
    k = 1 if len(rows) < 2 else 2 if len(rows) <= PANEL_ROWS else 3
    half = -(-len(rows) // k)
    panels = [rows[i:i + half] for i in range(0, len(rows), half)]
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5, 0.6 + 0.1 * half), squeeze=False)
    lim = 4.0
    for ax, part in zip(axes[0], panels):
        n = len(part)
        for i, r in enumerate(reversed(part)):
            lo, hi, d = (max(-lim, min(lim, x)) if x == x else 0.0
                         for x in (r["lo"], r["hi"], r["d"]))
            c = colors.get(r["verdict"], "tab:gray")
            ax.plot([lo, hi], [i, i], color=c, lw=1.5)
            ax.plot([d], [i], "o", color=c, mfc="white" if r["borderline"] else c, ms=4)
            for b in r["bounds"]:
                ax.plot([b, b], [i - 0.4, i + 0.4], color="black", lw=0.8, ls="--")
        ax.axvline(0, color="gray", lw=0.6)
        ax.set_yticks(range(n))
        ax.set_yticklabels([r["claim"] for r in reversed(part)], fontsize=5.5)
        ax.set_ylim(-0.7, half - 0.3)
        ax.set_xlim(-lim, lim)
        ax.tick_params(axis="x", labelsize=6)
        ax.set_xlabel("units of the boundary (dashed), clipped at ±4", fontsize=5)
        ax.grid(alpha=0.3, axis="x")
    _save(fig, path)


DRAW = {"paper_curves": paper_curves, "order_curves": order_curves, "ff_curves": ff_curves,
        "error_bars": error_bars, "rnn_curves": rnn_curves, "hidden": hidden, "gain": gain}


def draw(fig: Figure, inp: Inputs, path: Path) -> None:
    """Draw (or copy) ``fig`` to ``path``."""
    if fig.kind == "copy":
        atomic_write_bytes(path, Path(fig.source).read_bytes())
        return
    runs = select(inp.runs, **dict(fig.where))
    if runs:
        DRAW[fig.kind](runs, path, fig.title)

"""Section 5.2's implicit learning-rate decay measured in function space
(``layernorm_paper.analysis.kl_step``) and the report's rule on it (``claim_lr_decay``)."""
from __future__ import annotations

import json
import math
import stat

import pytest
import torch
from torch import nn

from layernorm_paper import report as R
from layernorm_paper.analysis import kl_step as K
from layernorm_paper.analysis.fisher import fit_exponent
from layernorm_paper.analysis.layer import load_digits_xy
from layernorm_paper.analysis.weight_growth import _mlp
from layernorm_paper.verdicts import INCONCLUSIVE, NO_LEARNING, NOT_SUPPORTED, SUPPORTED


# ---------------------------------------------------------------- the measure

def _kl_of_step(norm: str, c: float, delta: torch.Tensor, x: torch.Tensor) -> float:
    """KL(p(c W) || p(c W + delta)) on x for a one-hidden-layer MLP (``norm`` on its hidden layer),
    W its first weight matrix: the same parameter step at a weight norm c times larger."""
    model = _mlp(norm, (x.shape[1], 12, 5), seed=3).double()
    W = next(m for m in model.modules() if isinstance(m, nn.Linear)).weight
    with torch.no_grad():
        W.mul_(c)
        before = K.probe_logp(model, x)
        W.add_(delta)
        after = K.probe_logp(model, x)
    return K.kl_mean(before, after)


def test_the_same_step_moves_an_ln_network_as_one_over_c_squared_and_a_plain_one_not():
    torch.manual_seed(0)
    x = torch.randn(64, 8, dtype=torch.float64)
    delta = 1e-3 * torch.randn(12, 8, dtype=torch.float64)
    cs = (1.0, 2.0, 4.0, 8.0)
    ln = [_kl_of_step("layer", c, delta, x) for c in cs]
    plain = [_kl_of_step("none", c, delta, x) for c in cs]
    assert all(v > 0 for v in ln + plain)
    # layer norm: KL(p(cW) || p(cW + delta)) = KL(p(W) || p(W + delta / c)) ~ c^-2 (quadratic)
    assert abs(fit_exponent(cs, ln) + 2) < 0.02, fit_exponent(cs, ln)
    assert ln[-1] / ln[0] == pytest.approx(1 / 64, rel=0.03)
    # no normalization: the step's effect on the logits does not shrink with the weight norm
    assert abs(fit_exponent(cs, plain)) < 0.5, fit_exponent(cs, plain)


def test_kl_mean_against_a_hand_computed_two_class_example():
    p = torch.tensor([[0.9, 0.1], [0.3, 0.7], [0.5, 0.5]], dtype=torch.float64)
    q = torch.tensor([[0.6, 0.4], [0.5, 0.5], [0.5, 0.5]], dtype=torch.float64)
    by_hand = ((0.9 * math.log(0.9 / 0.6) + 0.1 * math.log(0.1 / 0.4))
               + (0.3 * math.log(0.3 / 0.5) + 0.7 * math.log(0.7 / 0.5)) + 0.0) / 3
    assert K.kl_mean(p.log(), q.log()) == pytest.approx(by_hand, rel=1e-12)
    # the direction is KL(before || after), not the reverse (which differs here)
    reverse = ((0.6 * math.log(0.6 / 0.9) + 0.4 * math.log(0.4 / 0.1))
               + (0.5 * math.log(0.5 / 0.3) + 0.5 * math.log(0.5 / 0.7))) / 3
    assert abs(reverse - by_hand) > 0.02
    assert K.kl_mean(q.log(), p.log()) == pytest.approx(reverse, rel=1e-12)
    assert K.kl_mean(p.log(), p.log()) == 0.0
    # a class of probability 0 under p adds nothing (0 log 0 = 0)
    p0 = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    assert K.kl_mean(p0.log(), q[:1].log()) == pytest.approx(math.log(1 / 0.6), rel=1e-12)
    with pytest.raises(ValueError, match="one shape"):
        K.kl_mean(p.log(), q[:2].log())


def test_training_records_one_kl_per_update_on_a_held_out_probe():
    x, y = load_digits_xy()
    x = x / 16
    tr, pr = K.probe_split(len(x), 64)
    assert set(tr.tolist()).isdisjoint(pr.tolist()) and len(tr) + len(pr) == len(x)
    assert torch.equal(K.probe_split(len(x), 64)[1], pr)           # fixed: same for every run
    runs = {n: K.train_kl_steps(x[tr], y[tr], x[pr], norm=n, steps=12, seed=1)
            for n in ("layer", "none")}
    for n, r in runs.items():
        log = r["log"]
        assert len(log["kl"]) == 12 and len(log["norm"]) == 2
        assert log["norm_update"] == [0, 5, 10, 11] and len(log["norm"][0]) == 4
        assert all(v > 0 for v in log["kl"])
        s = r["summary"]
        a, b = s["windows"]["early"]
        assert s["kl_early"] == pytest.approx(sum(log["kl"][a:b]) / (b - a), rel=1e-5)
        assert s["angle_early"] > 0 and s["norm_growth"][0] == pytest.approx(
            log["norm"][0][-1] / log["norm"][0][0], rel=1e-5)
        assert s["log_kl_late_over_early"] == pytest.approx(math.log(s["kl_late"] / s["kl_early"]))
    # under layer norm the gradient is orthogonal to W: ||W|| only grows
    assert all(b >= a for a, b in zip(runs["layer"]["log"]["norm"][0],
                                      runs["layer"]["log"]["norm"][0][1:]))
    # the first update's KL is the KL between the initial and the updated network, recomputed
    model = _mlp("layer", tuple(runs["layer"]["sizes"]), seed=1)
    opt = torch.optim.SGD(model.parameters(), lr=runs["layer"]["lr"])
    idx = torch.randint(0, len(tr), (32,), generator=torch.Generator().manual_seed(1))
    before = K.probe_logp(model, x[pr])
    nn.functional.cross_entropy(model(x[tr][idx]), y[tr][idx]).backward()
    opt.step()
    assert runs["layer"]["log"]["kl"][0] == pytest.approx(
        K.kl_mean(before, K.probe_logp(model, x[pr])), rel=1e-5)       # logged to 6 digits
    with pytest.raises(ValueError, match="norm in"):
        K.train_kl_steps(x[tr], y[tr], x[pr], norm="batch", steps=4)
    with pytest.raises(ValueError, match="probe_size"):
        K.probe_split(10, 9)


def test_windows_leave_out_a_warm_up_and_compare_quarters():
    assert K.windows(300) == {"warmup": 75, "early": [75, 131], "late": [244, 300]}
    assert K.windows(2) == {"warmup": 0, "early": [0, 1], "late": [1, 2]}
    with pytest.raises(ValueError, match="at least 2"):
        K.windows(1)


def test_measure_and_figure(tmp_path):
    from layernorm_paper.analysis.geometry_figures import plot_kl_steps
    x, y = load_digits_xy()
    kl = K.measure_kl_steps(x[:300] / 16, y[:300], steps=8, seeds=(4, 7), probe_size=50)
    assert kl["seeds"] == [4, 7] and kl["probe_size"] == 50 and kl["train_size"] == 250
    assert [r["seed"] for r in kl["runs"]["layer"]] == [r["seed"] for r in kl["runs"]["none"]]
    path = plot_kl_steps(kl, tmp_path / "kl_step.png")
    data = (tmp_path / "kl_step.png").read_bytes()
    assert path.endswith("kl_step.png") and data[:8] == b"\x89PNG\r\n\x1a\n"
    assert stat.S_IMODE((tmp_path / "kl_step.png").stat().st_mode) & 0o044 == 0o044
    with pytest.raises(ValueError, match="distinct seeds"):
        K.measure_kl_steps(x[:300] / 16, y[:300], steps=4, seeds=(1, 1))


# ---------------------------------------------------------------- the report's rule

def kl_section(ln_logs, none_logs, *, loss: float = 0.05, classes: int = 10) -> dict:
    """A ``geometry.json["kl_step"]`` built by hand: per seed, each arm's log(KL late / early)."""
    def run(norm, seed, lg):
        early = 0.5
        return {"norm": norm, "seed": seed, "final_train_loss": loss, "batch_size": 32,
                "summary": {"kl_early": early, "kl_late": early * math.exp(lg),
                            "kl_late_over_early": math.exp(lg), "log_kl_late_over_early": lg,
                            "angle_late_over_early": 0.3, "norm_growth": [2.0, 1.5]}}
    return {"steps": 300, "seeds": list(range(len(ln_logs))), "optimizer": "sgd", "lr": 0.5,
            "sizes": [64, 64, 64, 10], "batch_size": 32, "probe_size": 256, "train_size": 1541,
            "classes": classes, "windows": K.windows(300),
            "runs": {"layer": [run("layer", s, v) for s, v in enumerate(ln_logs)],
                     "none": [run("none", s, v) for s, v in enumerate(none_logs)]}}


def _write(root, kl):
    (root / "analysis" / "geometry").mkdir(parents=True, exist_ok=True)
    geo = {"curvature": {"methods": {}}}
    if kl is not None:
        geo["kl_step"] = kl
    (root / "analysis" / "geometry" / "geometry.json").write_text(json.dumps(geo))


def _lr_decay(root):
    R.build_report(root)
    return {r["claim"]: r for r in json.loads((root / "summary.json").read_text())}["5.2-lr-decay"]


JITTER = (0.0, 0.02, -0.02, 0.01, -0.01, 0.03, -0.03, 0.015)
WIDE = (0.0, -1.5, 1.5, -1.0, 1.0)                  # a spread of 1.2 in the log ratio


def _arms(ln: float, none: float, jitter=JITTER):
    """Per seed log ratios; the un-normalized arm's jitter differs from LN's seed by seed."""
    return ([ln + j for j in jitter], [none - j * (-1) ** i for i, j in enumerate(jitter)])


@pytest.mark.parametrize("ln, none, jitter, want", [
    (-2.0, -1.0, JITTER, SUPPORTED),                 # LN's KL falls e^1 = 2.7x more
    (-1.5, -1.5, JITTER, NOT_SUPPORTED),             # the same decay
    (-1.0, -2.0, JITTER, NOT_SUPPORTED),             # LN's falls less
    (-1.22, -1.0, JITTER, INCONCLUSIVE),             # ~1.26x: the interval straddles 1.25x
    (-2.0, -1.0, WIDE, INCONCLUSIVE),                # 2.7x, but an interval wider than that
])
def test_lr_decay_rule(tmp_path, ln, none, jitter, want):
    _write(tmp_path, kl_section(*_arms(ln, none, jitter)))
    res = _lr_decay(tmp_path)
    assert res["verdict"] == want, res
    md = (tmp_path / "report.md").read_text()
    assert "per-update KL" in md and "paired t-interval" in md and "power: half-width" in md
    assert "log 1.25" in md
    if jitter is WIDE:
        assert "inconclusive: underpowered" in md and "h ≤ margin needs ≥" in md
    elif want == INCONCLUSIVE:
        assert "inconclusive: a straddle" in md


def test_lr_decay_guard_and_not_run(tmp_path):
    # the networks did not learn: final training loss above 0.9 ln 10
    _write(tmp_path, kl_section(*_arms(-2.0, -1.0), loss=0.95 * math.log(10)))
    res = _lr_decay(tmp_path)
    assert res["verdict"] == NO_LEARNING
    assert "did not learn" in (tmp_path / "report.md").read_text()
    # one LN run's final loss spikes, the arm learned on average: judged, and the run named
    kl = kl_section(*_arms(-2.0, -1.0))
    kl["runs"]["layer"][3]["final_train_loss"] = 2.2
    _write(tmp_path, kl)
    assert _lr_decay(tmp_path)["verdict"] == SUPPORTED
    assert "not below 0.9 · ln 10" in (tmp_path / "report.md").read_text()
    assert "LN seed 3 (2.2 nats)" in (tmp_path / "report.md").read_text()
    # a geometry.json without the per-update KL runs (an older one): not run, saying why
    _write(tmp_path, None)
    res = _lr_decay(tmp_path)
    assert res["verdict"] == R.NOT_RUN
    assert "per-update KL" in (tmp_path / "report.md").read_text()

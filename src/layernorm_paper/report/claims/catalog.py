"""The claim list: the one place that maps each claim to the experiment that tests it (and the
heading it is listed under), and ``judge``, which evaluates every claim once and the composite
statements from their parts' results."""
from __future__ import annotations

from ..runs import DDP_EXPERIMENT, Inputs
from ...verdicts import all_of
from .base import (MIN_HIDDEN_T, SUFFERS_MARGIN, CHECK, COMPOSITE, Claim, ClaimResult, not_run)
from .checks import claim_batch_split, claim_curvature, claim_lr_decay, claim_table1
from .feedforward import (claim_beats, claim_bn_collapse, claim_bn_suffers,
                          claim_ln_faster_than_bn, claim_ln_stable)
from .order import ORDER_EXPERIMENT, claim_order_recall, claim_order_sooner
from .paper import full_forms_run, paper_claims
from .rnn import (claim_gain_init, claim_rnn_best, claim_rnn_fastest, claim_rnn_hidden_stable)

RNN_EXPERIMENTS = ("rnn_norms", "rnn_downloads")
STABILITY_EXPERIMENT = "rnn_stability"      # long sequences (T >= MIN_HIDDEN_T)
TASK_NAMES = {"digits-pixels": "pixel-sequence digits (permuted)", "mnist1d-seq": "MNIST-1D",
              "adding": "the adding problem (long sequences)", "imdb": "IMDb sentiment",
              "tiny-shakespeare": "char-level LM on tiny-shakespeare, standing in for MSR Sentence "
                                  "Completion"}
DOWNLOAD_TASKS = (("rnn_downloads", "imdb"), ("rnn_downloads", "tiny-shakespeare"))
DDP_SECTION = "Distributed: 1 process x batch 8 vs 2 processes x 4"


def claims_for_tasks(rnn_tasks: list[tuple[str, str]],
                     stability_tasks: list[tuple[str, str]] = ((STABILITY_EXPERIMENT, "adding"),),
                     full_forms: tuple[str, ...] = ()) -> list[Claim]:
    """All claims; RNN claims are made for every (experiment, task) given: convergence and
    accuracy for ``rnn_tasks``, hidden-state stability for ``stability_tasks``; section 6
    claims on the downloaded full forms of the experiments in ``full_forms``."""
    mlp, cnn, gain = "mlp_batch_size", "cnn_batch_size", "lstm_gain_init"
    s66, s67 = "6.6 batch-size sensitivity", "6.7 ConvNets + summary B's CNN claim"
    out = [
        Claim("6.6-bn", "paper 6.6", "“BN suffers at batch 4” (MLP, Adam, batch 128 vs 4)", mlp,
              claim_bn_suffers(mlp, 4, 128, SUFFERS_MARGIN, "MLP"), s66),
        Claim("6.6-ln", "paper 6.6", "“LN robust to batch size”", mlp,
              claim_ln_stable(mlp, (4,), 128, "MLP"), s66),
        Claim("6.6-fast", "paper 6.6", "“[LN] faster than BN” (training NLL)", mlp,
              claim_ln_faster_than_bn(mlp, (128, 4), "MLP"), s66),
        Claim("6.7-ln-none", "paper 6.7", "“LN beats no normalization” (ConvNets)", cnn,
              claim_beats(cnn, "layer", "none", 128, "ConvNet"), s67),
        Claim("6.7-bn-ln", "paper 6.7; summary B", "“BN beats LN” (paper) / “at batch 128 BN is "
              "slightly better than LN” (summary B)", cnn,
              claim_beats(cnn, "batch", "layer", 128, "ConvNet"), s67),
        Claim("cnn-bn-collapse", "summary B", "“when the batch size drops to 1 or 4, BN's "
              "performance falls sharply”", cnn, claim_bn_collapse(cnn), s67),
        Claim("cnn-ln-stable", "summary B", "“… while LN's performance stays stable” (batch 1, 4 "
              "vs 128)", cnn, claim_ln_stable(cnn, (4, 1), 128, "ConvNet"), s67),
        Claim("6.7-paper", "paper 6.7", "Paper, as a whole: “LN beats no normalization, BN beats "
              "LN” (ConvNet, batch 128)", cnn, None, s67, COMPOSITE,
              ("6.7-ln-none", "6.7-bn-ln")),
        Claim("cnn-summary-b", "summary B", "Summary B, as a whole: “BN slightly better at 128, "
              "collapses at 1 and 4, LN stays stable” (ConvNet)", cnn, None, s67, COMPOSITE,
              ("6.7-bn-ln", "cnn-bn-collapse", "cnn-ln-stable")),
    ]
    s61 = "6.1 order embeddings (reduced form)"
    out += [
        Claim("6.1-order-recall", "paper 6.1", "“order embeddings with an LN-GRU caption encoder "
              "reach a higher recall” (R@1 and R@10, caption and image retrieval)",
              ORDER_EXPERIMENT, claim_order_recall, s61),
        Claim("6.1-order-sooner", "paper 6.1", "“… and their best validation model in 60% of "
              "the time” (updates to the best validation model, LN-GRU vs GRU)",
              ORDER_EXPERIMENT, claim_order_sooner, s61),
    ]
    out += paper_claims(full_forms)
    for rnn, t in rnn_tasks:
        name = TASK_NAMES.get(t, t)
        sec = f"RNNs: LSTM vs BN-LSTM vs LN-LSTM on {name}"
        out += [
            Claim(f"rnn-fast-{t}", "summary B; paper 6.2/6.5",
                  f"“LSTM with LN converges fastest” ({name})", rnn, claim_rnn_fastest(rnn, t),
                  sec),
            Claim(f"rnn-best-{t}", "summary B", f"“LN-LSTM reaches the best accuracy” ({name})",
                  rnn, claim_rnn_best(rnn, t), sec),
        ]
    for exp, t in stability_tasks:
        name = TASK_NAMES.get(t, t)
        out.append(Claim(f"rnn-hidden-{t}", "summary B; paper 3.1",
                         f"“LN keeps the hidden-state distribution stable, while the plain "
                         f"LSTM's changes sharply” ({name}, T ≥ {MIN_HIDDEN_T})", exp,
                         claim_rnn_hidden_stable(exp, t),
                         f"RNNs: hidden-state stability on {name}"))
    out += [
        Claim("6.2-gain", "paper 6.2", "“initializing the LN gain to 1.0 is significantly "
              "better than 0.1” (LN-LSTM)", gain, claim_gain_init(gain), "6.2 gain initialisation"),
        Claim("table1", "paper 5.1 (Table 1); summary A", "“invariance properties of batch, "
              "weight and layer normalization” (Table 1)", "analysis", claim_table1, "Analysis",
              CHECK),
        Claim("5.2-curvature", "paper 5.2; summary A", "“the normalization scalar σ implicitly "
              "reduces the learning rate”: curvature along w_i scales as ||w_i||⁻²", "analysis",
              claim_curvature, "Analysis", CHECK),
        Claim("5.2-lr-decay", "paper 5.2", "“a growing weight norm acts as an implicit "
              "learning-rate decay” (early-stopping effect), beyond an un-normalized network's",
              "analysis", claim_lr_decay, "Analysis"),
        Claim("ddp-ln", "paper 3", "“LN: splitting a batch over processes changes nothing” "
              "(identical parameters within float tolerance)", DDP_EXPERIMENT,
              claim_batch_split("layer", True), DDP_SECTION, CHECK),
        Claim("ddp-bn", "paper 3", "“BN: each process normalizes over its own slice” "
              "(measurably different parameters)", DDP_EXPERIMENT,
              claim_batch_split("batch", False), DDP_SECTION, CHECK),
        Claim("ddp-bn-sync", "docs/distributed.md", "“BN + --sync-bn: statistics over the global "
              "batch” (identical parameters again)", DDP_EXPERIMENT,
              claim_batch_split("batch + sync", True), DDP_SECTION, CHECK),
    ]
    return out


def claims_for(inp: Inputs) -> list[Claim]:
    """The claims for these inputs: RNN claims for every task found (the download tasks, and the
    stability experiment's adding problem, listed even when absent)."""
    tasks = sorted({(r.experiment, r.task) for r in inp.runs if r.experiment in RNN_EXPERIMENTS})
    tasks += [p for p in DOWNLOAD_TASKS if p not in tasks]
    stable = sorted({(r.experiment, r.task) for r in inp.runs
                     if r.experiment == STABILITY_EXPERIMENT}) or [(STABILITY_EXPERIMENT, "adding")]
    return claims_for_tasks(tasks, stable, full_forms_run(inp))


def composite(claim: Claim, parts: list[ClaimResult]) -> ClaimResult:
    """A statement made of other claims: all_of their verdicts (each part judged once)."""
    if not all(r.measured for r in parts):
        missing = [p for p, r in zip(claim.parts, parts) if not r.measured]
        return not_run(f"its part(s) {', '.join(missing)} were not run")
    v = all_of([r.verdict for r in parts], f"every part must be supported: "
                                           f"{', '.join(claim.parts)}")
    return ClaimResult(v, "; ".join(f"{p}: {r.verdict.verdict}" for p, r in
                                    zip(claim.parts, parts)), [])


def judge(inp: Inputs, claims: list[Claim] | None = None) -> list[tuple[Claim, ClaimResult]]:
    """Every claim's result: each claim evaluated once, composites from their parts' results."""
    claims = claims_for(inp) if claims is None else claims
    results: dict[str, ClaimResult] = {}
    for c in claims:
        if c.kind != COMPOSITE:
            results[c.id] = c.evaluate(inp)
    for c in claims:
        if c.kind == COMPOSITE:
            results[c.id] = composite(c, [results[p] for p in c.parts])
    return [(c, results[c.id]) for c in claims]



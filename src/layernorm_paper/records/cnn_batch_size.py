"""Section 6.7 and summary B's claim (docs/paper.md, section 6): a ConvNet at batch 128, 4 and 1
— LN beats no normalization, BN beats LN at batch 128 (the paper); BN collapses at batch 1 and 4
while LN stays stable (summary B). On the full MNIST (downloaded) from the quick scale up, as
summary B ran it; the tiny scale's wiring check keeps the 8x8 digits."""
from __future__ import annotations

from dataclasses import replace

from ._record import EMBEDDED, REAL, SEEDS, STAND_IN, Record, Sweep, config, pick, split

NAME = "cnn_batch_size"
HEADING = "6.7 ConvNets + summary B's CNN claim"
# Seeds at batch 128 for the arms the BN-vs-LN comparison (a 0.5 pp margin) reads: ten on the
# 8x8 digits (a 360-image test split, 0.28 pp per image), five on MNIST (10,000 test digits)
SEEDS_128 = {"tiny": (0,), "quick": SEEDS["quick"], "full": tuple(range(10))}
# The quick scale's test set: the first TEST_DIGITS of MNIST's 10,000 test digits (0.05 pp per
# image), every evaluation scores it (twice for BN: running averages and population statistics)
TEST_DIGITS = 2000
# (steps, eval_every) per batch size: see the record's budget
LENGTH = {"tiny": {128: (6, 3), 1: (6, 3)},
          "quick": {128: (1200, 60), 4: (4800, 240), 1: (6400, 320)},
          "full": {128: (6000, 250), 4: (30000, 1000), 1: (30000, 1000)}}


def configs(scale: str) -> list:
    """tiny: the 8x8 digits (seconds, wiring only); quick and full: MNIST 28x28 (downloaded),
    quick on ``TEST_DIGITS`` test digits with 8-16-16 channels, full on all 10,000 with
    32-64-64."""
    dataset = pick(scale, tiny="digits-image", quick="mnist", full="mnist")
    channels = pick(scale, tiny=[4, 8], quick=[8, 16, 16], full=[32, 64, 64])
    batches = pick(scale, tiny=(128, 1), quick=(128, 4, 1), full=(128, 4, 1))
    data_args = pick(scale, tiny=None, quick={"view": "image", "limit_test": TEST_DIGITS},
                     full={"view": "image"})
    length = LENGTH[scale]
    out = []
    for norm in ("none", "batch", "layer"):
        for bs in batches:
            steps, every = length[bs]
            seeds = SEEDS_128[scale] if bs == 128 and norm != "none" else SEEDS[scale]
            for seed in seeds:
                out.append(config(dataset=dataset, model="convnet", norm=norm, batch_size=bs,
                                  seed=seed, optimizer="adam", lr=1e-3, steps=steps,
                                  eval_every=every, checkpoint_every=steps // 4,
                                  data_args=dict(data_args or split(dataset, seed)),
                                  model_args={"channels": channels, "unbiased": bs < 16}))
    return out


def claims(found, R) -> list:
    """On MNIST ("real": summary B's data) where its runs are found, else on the 8x8 digits
    (the tiny scale: a stand-in)."""
    data = REAL if (NAME, "mnist") in found.pairs else STAND_IN
    return [replace(c, data=data) for c in _claims(R)]


def _claims(R) -> list:
    return [
        R.Claim("6.7-ln-none", "paper 6.7", "“LN beats no normalization” (ConvNets)", NAME,
              R.claim_beats(NAME, "layer", "none", 128, "ConvNet"), HEADING,
              paper="qualitative, text (preliminary results)"),
        R.Claim("6.7-bn-ln", "paper 6.7; summary B", "“BN beats LN” (paper) / “at batch 128 BN is "
              "slightly better than LN” (summary B)", NAME,
              R.claim_beats(NAME, "batch", "layer", 128, "ConvNet"), HEADING,
              paper="qualitative, text (preliminary results); summary B: no number"),
        R.Claim("cnn-bn-collapse", "summary B", "“when the batch size drops to 1 or 4, BN's "
              "performance falls sharply”", NAME, R.claim_bn_collapse(NAME), HEADING,
              paper="qualitative, no number"),
        R.Claim("cnn-ln-stable", "summary B", "“… while LN's performance stays stable” (batch 1, 4 "
              "vs 128)", NAME, R.claim_ln_stable(NAME, (4, 1), 128, "ConvNet"), HEADING,
              paper="qualitative, no number"),
        R.Claim("6.7-paper", "paper 6.7", "Paper, as a whole: “LN beats no normalization, BN beats "
              "LN” (ConvNet, batch 128)", NAME, None, HEADING, R.COMPOSITE,
              ("6.7-ln-none", "6.7-bn-ln")),
        R.Claim("cnn-summary-b", "summary B", "Summary B, as a whole: “BN slightly better at 128, "
              "collapses at 1 and 4, LN stays stable” (ConvNet)", NAME, None, HEADING, R.COMPOSITE,
              ("6.7-bn-ln", "cnn-bn-collapse", "cnn-ln-stable")),
    ]


RECORD = Record(
    NAME, position=30, data=REAL, section="6.7 + summary B",
    claim="ConvNet: LN beats no normalization but BN beats LN (paper); BN wins slightly at batch "
          "128 and collapses at batch 1 and 4 while LN stays stable (summary B)",
    tier=EMBEDDED, pack=4, configs=configs, claims=claims,
    sweep=Sweep(10),
    budget={"rule": "to convergence",
            "text": "each batch size gets its own number of updates, set for its test error to "
                    "stop falling where the tier's time allows, batch 4 and batch 1 possibly "
                    "short of it (the update counts and each arm's late change below are read "
                    "from these runs)"},
    paper="paper 6.7: preliminary ConvNet results, settings not given; summary B: a CNN on MNIST "
          "at batch 128, 4 and 1 (no architecture, optimizer or length given)",
    data_here={NAME: "MNIST, downloaded (60,000 training digits; the first 2,000 of the 10,000 "
                     "test digits at every evaluation); ConvNet 28x28 with 8-16-16 channels "
                     "(3x3 convolutions, the last two of stride 2, a linear head on the 7x7 "
                     "map), Adam: at batch 128 each arm at the rate `layernorm sweep-lr --batch "
                     "128` chose on a validation split of MNIST (1 seed, no widening), at batch "
                     "4 and 1 at 1e-3 (not swept on MNIST); batch 128 for 1,200 "
                     "updates (2.6 epochs), batch 4 for 4,800 (0.32 epoch), batch 1 for 6,400 "
                     "(0.11 epoch), 5 seeds (quick scale); full scale: 32-64-64 channels, every "
                     "test digit, 10 seeds at batch 128; the 8x8 digits at the tiny scale only"})

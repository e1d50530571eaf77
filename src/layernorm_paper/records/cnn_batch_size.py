"""Section 6.7 and summary B's claim (docs/paper.md, section 6): a ConvNet at batch 128, 4 and 1
— LN beats no normalization, BN beats LN at batch 128 (the paper); BN collapses at batch 1 and 4
while LN stays stable (summary B)."""
from __future__ import annotations

from ._record import SEEDS, Record, config, pick, split

NAME = "cnn_batch_size"
HEADING = "6.7 ConvNets + summary B's CNN claim"
# The BN-vs-LN comparison at batch 128 (a 0.5 pp margin) gets ten seeds.
SEEDS_128 = {"tiny": (0,), "quick": tuple(range(10)), "full": tuple(range(10))}


def configs(preset: str) -> list:
    dataset = pick(preset, tiny="digits-image", quick="digits-image", full="mnist")
    channels = pick(preset, tiny=[4, 8], quick=[16, 32, 32], full=[32, 64, 64])
    batches = pick(preset, tiny=(128, 1), quick=(128, 4, 1), full=(128, 4, 1))
    # (steps, eval_every) per batch size: see BUDGET
    length = pick(preset, tiny={128: (6, 3), 1: (6, 3)},
                  quick={128: (1200, 50), 4: (2400, 100), 1: (4800, 200)},
                  full={128: (6000, 250), 4: (30000, 1000), 1: (30000, 1000)})
    out = []
    for norm in ("none", "batch", "layer"):
        for bs in batches:
            steps, every = length[bs]
            seeds = SEEDS_128[preset] if bs == 128 and norm != "none" else SEEDS[preset]
            for seed in seeds:
                data_args = {"view": "image"} if preset == "full" else split(dataset, seed)
                out.append(config(dataset=dataset, model="convnet", norm=norm, batch_size=bs,
                                  seed=seed, optimizer="adam", lr=1e-3, steps=steps,
                                  eval_every=every, checkpoint_every=steps // 4,
                                  data_args=data_args,
                                  model_args={"channels": channels, "unbiased": bs < 16}))
    return out


def claims(found, R) -> list:
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
    NAME, section="6.7 + summary B",
    claim="ConvNet: LN beats no normalization but BN beats LN (paper); BN wins slightly at batch "
          "128 and collapses at batch 1 and 4 while LN stays stable (summary B)",
    tier="standard", pack=4, configs=configs, claims=claims,
    budget={"rule": "to convergence",
            "text": "each batch size gets its own number of updates, set for its test error to "
                    "stop falling where the tier's time allows, batch 1 possibly short of it (the "
                    "update counts and each arm's late change below are read from these runs)"},
    paper="paper 6.7: preliminary ConvNet results, settings not given; summary B: a CNN on MNIST "
          "at batch 128, 4 and 1")

"""Section 6.6: batch-size sensitivity of an MLP (Adam, batch 128 vs 4) — LN is robust to the
batch size and trains faster than BN; BN suffers at batch 4."""
from __future__ import annotations

from ._record import QUICK, SEEDS, Record, Sweep, config, pick, split

NAME = "mlp_batch_size"
HEADING = "6.6 batch-size sensitivity"


def _split(dataset: str, seed: int) -> dict:
    """The test split varies with the seed: mnist-5k's stratified split, as the digits'."""
    return {"split_seed": seed} if dataset == "mnist-5k" else split(dataset, seed)


def configs(scale: str) -> list:
    """Arms: none, batch (BN on the hidden layers, as LN), batch with tag "bnall" (BN on all
    layers, the logits too: the paper's wording), layer; full adds weight and rms. Each evaluated
    every ``eval_every`` updates with ``steps = eval_every * 2**k``, so the log-spaced update
    counts eval_every * 2**j are all rows (for "trains faster" on a log scale)."""
    norms = pick(scale, tiny=("batch", "layer"), quick=("none", "batch", "layer"),
                 full=("none", "batch", "layer", "weight", "rms"))
    # quick: 5,000 real MNIST digits (28x28, the paper's 784 inputs) from an installed wheel,
    # 4,000 train / 1,000 test split by the seed; full: the downloaded MNIST (55k / 10k)
    dataset = pick(scale, tiny="mnist-5k", quick="mnist-5k", full="mnist")
    hidden = pick(scale, tiny=[16, 16], quick=[128, 128], full=[1000, 1000])
    # (steps, eval_every) per batch size: see BUDGET
    length = pick(scale, tiny={128: (8, 2), 4: (8, 2)}, quick={128: (800, 25), 4: (6400, 100)},
                  full={128: (12800, 100), 4: (51200, 400)})
    arms = [(norm, "", False) for norm in norms] + [("batch", "bnall", True)]
    out = []
    for norm, tag, bn_logits in arms:
        for bs in (128, 4):
            steps, every = length[bs]
            for seed in SEEDS[scale]:
                args = {"hidden": hidden, "unbiased": bs < 16}   # paper: n - 1 at batch 4
                if bn_logits:
                    args["bn_logits"] = True
                out.append(config(dataset=dataset, model="repro_mlp", norm=norm, batch_size=bs,
                                  seed=seed, optimizer="adam", lr=1e-3, tag=tag,
                                  steps=steps, eval_every=every, checkpoint_every=steps // 4,
                                  data_args=_split(dataset, seed), model_args=args))
    return out


def claims(found, R) -> list:
    return [
        R.Claim("6.6-bn", "paper 6.6", "“BN suffers at batch 4” (MLP, Adam, batch 128 vs 4)", NAME,
              R.claim_bn_suffers(NAME, 4, 128, R.SUFFERS_MARGIN, "MLP"), HEADING,
              paper="qualitative, Fig. 6"),
        R.Claim("6.6-ln", "paper 6.6", "“LN robust to batch size”", NAME,
              R.claim_ln_stable(NAME, (4,), 128, "MLP"), HEADING, paper="qualitative, Fig. 6"),
        R.Claim("6.6-fast", "paper 6.6", "“[LN] faster than BN” (training error over training; "
              "the NLL where no error is recorded)", NAME,
              R.claim_ln_faster_than_bn(NAME, (128, 4), "MLP"), HEADING,
              paper="qualitative, Fig. 6"),
    ]


RECORD = Record(
    NAME, position=10, section="6.6",
    claim="LN is robust to the batch size and trains faster than BN; BN suffers at batch 4 "
          "(MLP, Adam, batch 128 vs 4)",
    tier=QUICK, pack=8, configs=configs, claims=claims,
    sweep=Sweep(9),
    # "to convergence": each arm is trained until its test error has flattened; "same updates":
    # every arm gets the same number of optimizer updates. Every config gives ``steps`` (the
    # update count of its arm).
    budget={"rule": "to convergence",
            "text": "each batch size gets its own number of updates, set for its test error to "
                    "stop falling (the update counts and each arm's late change below are read "
                    "from these runs)"},
    paper="paper 6.6: MLP 784-1000-1000-10 on MNIST (55k training images), Adam, batch 128 and 4")

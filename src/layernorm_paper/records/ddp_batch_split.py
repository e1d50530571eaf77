"""Section 3: LN's statistics are per example, so splitting each batch over processes (DDP)
trains the same parameters; BN's are not, unless SyncBatchNorm takes them over the global batch
(docs/distributed.md). Trained by ``layernorm reproduce``'s distributed part on 1 and on 2
processes; the model is the runner's ``mlp``."""
from __future__ import annotations

from ..batch_split import DDP_EXPERIMENT as NAME
from ._record import Record, config

HEADING = "Distributed: 1 process x batch 8 vs 2 processes x 4"


def configs(scale: str) -> list:
    """Run it once plainly and once under ``torchrun --nproc-per-node 2``, then
    ``layernorm ddp-compare OUT/ddp_batch_split``."""
    hidden = {"tiny": [32], "quick": [64, 64], "full": [256, 256]}[scale]
    steps, eval_every = {"tiny": (6, 2), "quick": (200, 50), "full": (2000, 250)}[scale]
    # BN with the n - 1 variance, as the paper at small batches: the count must be the global one
    # (the mlp ignores `unbiased` for other norms, so --norm overrides collapse duplicates).
    base = dict(dataset="digits", model="mlp", batch_size=8, optimizer="sgd", lr=0.1,
                steps=steps, eval_every=eval_every,
                model_args={"hidden": hidden, "unbiased": True})
    return [config(norm="layer", **base), config(norm="batch", **base),
            config(norm="batch", sync_bn=True, **base)]


CHECKED = "check of this implementation"     # not a claim of the paper (docs/distributed.md)


def claims(found, R) -> list:
    return [
        R.Claim("ddp-ln", CHECKED, "“LN: splitting a batch over processes changes nothing” "
              "(identical parameters within float tolerance)", NAME,
              R.claim_batch_split("layer", True), HEADING, R.CHECK),
        R.Claim("ddp-bn", CHECKED, "“BN: each process normalizes over its own slice” "
              "(measurably different parameters)", NAME,
              R.claim_batch_split("batch", False), HEADING, R.CHECK),
        R.Claim("ddp-bn-sync", CHECKED, "“BN + --sync-bn: statistics over the global "
              "batch” (identical parameters again)", NAME,
              R.claim_batch_split("batch + sync", True), HEADING, R.CHECK),
    ]


RECORD = Record(
    NAME, position=180, section="3",
    claim="LN statistics are per example, so splitting each batch of 8 over 2 processes (DDP) "
          "trains the same parameters; BN's do not, unless SyncBatchNorm (--sync-bn) takes them "
          "over the global batch",
    configs=configs, claims=claims)

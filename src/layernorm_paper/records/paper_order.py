"""Section 6.1: order embeddings (Vendrov et al. 2016) with a GRU vs an LN-GRU caption encoder —
LN-GRU retrieves better and reaches its best validation model sooner. The model is
``layernorm_paper.models.paper``'s ``order``; the rules are ``report.claims.order``'s."""
from __future__ import annotations

from ._record import EMBEDDED, Record, Sweep, arms, pick

NAME = "paper_order"
HEADING = "6.1 order embeddings (reduced form)"


def configs(scale: str) -> list:
    data = pick(scale, tiny={"n_captions": 2, "n_val": 16, "n_test": 16},
                quick={"n_captions": 5, "n_val": 300, "n_test": 300},
                full={"n_captions": 10, "n_val": 300, "n_test": 300})
    model = pick(scale, tiny={"dim": 8, "word_dim": 8, "image_hidden": 8},
                 quick={"dim": 64, "word_dim": 32, "image_hidden": 128},
                 full={"dim": 128, "word_dim": 64, "image_hidden": 256})
    length = pick(scale, tiny={"steps": 4, "eval_every": 2},
                  quick={"steps": 2250, "eval_every": 75},
                  full={"steps": 6000, "eval_every": 200})
    return arms(scale, "digit-captions", "order", ("none", "layer"),
                batch_size=pick(scale, tiny=16, quick=128, full=128), model_args=model,
                data_args=dict(data, limit_train=64) if scale == "tiny" else data,
                length=length, lr=1e-3, grad_clip=2.0)


def claims(found, R) -> list:
    return [
        R.Claim("6.1-order-recall", "paper 6.1", "“order embeddings with an LN-GRU caption encoder "
              "reach a higher recall” (R@1 and R@10, caption and image retrieval)",
              NAME, R.claim_order_recall, HEADING,
              paper="caption R@1 46.6 → 48.5, image R@1 37.8 → 38.9 (Table 2)"),
        R.Claim("6.1-order-sooner", "paper 6.1", "“… and their best validation model in 60% of "
              "the time” (LN-GRU's updates to a validation R-sum both arms reach / the GRU's "
              "≈ 0.6: the ratio GRU / LN-GRU ≥ (1/0.6)/√2)",
              NAME, R.claim_order_sooner, HEADING, paper="≈ 60% of the time, Fig. 1"),
    ]


RECORD = Record(
    NAME, position=50, section="6.1",
    claim="order embeddings with an LN-GRU caption encoder retrieve better (R@1 46.6 -> 48.5 "
          "caption, 37.8 -> 38.9 image retrieval, MS-COCO) and reach their best validation model "
          "in about 60% of the GRU's time",
    tier=EMBEDDED, pack=5, configs=configs, claims=claims,
    sweep=Sweep(8, "val_c2i_rsum", "max",
                "best validation R-sum (image retrieval R@1 + R@5 + R@10)"),
    paper="paper 6.1: order embeddings (Vendrov et al. 2016), GRU vs LN-GRU sentence encoder "
          "(1024 units, 300-d word vectors), VGG image features, MS-COCO (1k test images), Adam "
          "1e-3, batch 128",
    paper_numbers={NAME: "paper (Table 2): caption retrieval R@1 46.6 -> 48.5, image retrieval "
                         "R@1 37.8 -> 38.9 (GRU -> LN-GRU, MS-COCO 1k test images); LN-GRU's "
                         "best validation model in about 60% of the baseline's training time"},
    data_here={NAME: "the 8x8 digits paired with generated captions"},
    not_run={"order embeddings on MS-COCO (6.1)": "the paper's data (MS-COCO captions with VGG "
                                                  "image features, Vendrov et al. 2016) has no "
                                                  "stable public download of the extracted "
                                                  "features; `paper_order` runs the embedded "
                                                  "stand-in (the digits with generated "
                                                  "captions) at every scale"})

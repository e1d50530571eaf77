"""The paper's section 6.1 in reduced form, registered with the runner: order embeddings
(Vendrov et al. 2016) with a GRU vs an LN-GRU caption encoder.

    paper_order  caption-image retrieval on digit captions (``layernorm_paper.data`` "digit-captions":
                 sklearn's 8x8 digits, each with generated token captions): Recall@1/5/10 both
                 ways on validation and test images vs updates, and the updates to the best
                 validation model

What the paper ran: MS-COCO (about 80k training images, 5 captions each; 1,000-image test splits)
with 4096-d VGG image features (10-crop), a 1024-d GRU over 300-d word embeddings, Adam at 1e-3,
batch 128 (Vendrov et al.'s setup); it reports R@1 46.6 -> 48.5 (caption retrieval) and 37.8 ->
38.9 (image retrieval), and LN's best validation model in about 60% of the baseline's time. That
needs MS-COCO's images (about 20 GB) and a pretrained VGG network to extract their features (the
pre-extracted features were served from a university web page, not an archive with a checksum);
this package fetches neither, so no preset runs it: ``full`` runs the same embedded task at a
larger scale (10 captions per image, larger encoders, longer training).

Presets: ``tiny`` (seconds; tests), ``quick`` (5 seeds, part of ``reproduce --preset
standard``), ``full``. Both arms train the same number of updates from the same seeds; model
selection follows Vendrov et al.: the validation model with the highest caption -> image R@1 +
R@5 + R@10 (``best_validation``).

The runner trains regression against zero targets: the registered model returns ``sqrt(loss +
1)`` per pair (``LossAsRegression``), so the runner's squared error is the per-pair contrastive
loss plus 1 and ``train_loss - 1`` is the mean per-pair loss. The retrieval metrics are computed
by ``extra_metrics`` over the whole validation and test splits at every evaluation.
"""
from __future__ import annotations

import torch
from torch import nn

from ..data import captions as _captions  # noqa: F401  (registers "digit-captions")
from ..data.captions import PIXELS, GREY_LEVELS
from ..experiments import register_model
from ..models.order import OrderEmbedding, retrieval_metrics, split_order_loss, violation_matrix
from .paper import SEEDS, LossAsRegression  # noqa: F401  (SEEDS: kept importable here)

SELECTION = "val_c2i_rsum"        # the validation criterion of the best model (Vendrov et al.)
RSUM_KEYS = ("c2i_r1", "c2i_r5", "c2i_r10")
MEAN_KEYS = ("c2i_r1", "c2i_r10", "i2c_r1", "i2c_r10")


class _PairRows(nn.Module):
    """The runner's rows (N, 64 + L) int64 = grey levels then caption tokens, with lengths (N,):
    the per-pair contrastive loss of ``OrderEmbedding``, the batch's other pairs the negatives.
    In eval mode (the runner's ``test_loss``) the negatives are the pair's block of
    ``eval_block`` consecutive rows: the training batch's size, not the runner's 1000-row
    evaluation chunks (whose all-pairs loss would cost more than the retrieval metrics)."""

    def __init__(self, model: OrderEmbedding, eval_block: int = 128):
        super().__init__()
        self.model, self.eval_block = model, eval_block

    @staticmethod
    def split(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x[:, :PIXELS].float() / GREY_LEVELS, x[:, PIXELS:]

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        images, tokens = self.split(x)
        if self.training:
            return self.model(tokens, lengths, images)
        b = self.eval_block
        return torch.cat([self.model(tokens[a:a + b], lengths[a:a + b], images[a:a + b])
                          for a in range(0, len(x), b)])


class OrderForRunner(LossAsRegression):
    """``OrderEmbedding`` trained by the runner; ``extra_metrics`` scores retrieval on the whole
    validation and test splits (held here, not in the state dict)."""

    def __init__(self, model: OrderEmbedding, splits: dict, captions_per_image: int,
                 eval_block: int = 128):
        super().__init__(_PairRows(model, eval_block), floor=1.0)
        self.splits, self.per_image = splits, captions_per_image

    @torch.no_grad()
    def score(self, x: torch.Tensor, lengths: torch.Tensor) -> dict:
        """Retrieval metrics of one split: rows image-major, ``captions_per_image`` per image."""
        n = len(x) // self.per_image * self.per_image
        device = next(self.parameters()).device
        x, lengths = x[:n].to(device), lengths[:n]
        images, tokens = _PairRows.split(x[::self.per_image])
        model = self.model.model
        s = torch.cat([model.encode_captions(tokens_, lengths_) for tokens_, lengths_ in
                       zip(_PairRows.split(x)[1].split(1024), lengths.split(1024))])
        e = violation_matrix(s, model.encode_images(images))
        image_of = torch.arange(n, device=device) // self.per_image
        out = retrieval_metrics(e, image_of)
        out["c2i_rsum"] = sum(out[k] for k in RSUM_KEYS)
        out["r_mean"] = sum(out[k] for k in MEAN_KEYS) / len(MEAN_KEYS)
        out["order_loss"] = split_order_loss(e, image_of, model.margin)
        out["violation"] = float(e.gather(1, image_of[:, None]).mean())
        out["images"] = n // self.per_image
        return out

    def extra_metrics(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> dict:
        row = {"captions_per_image": self.per_image}
        for name, (xs, ls) in self.splits.items():
            row.update({f"{name}_{k}": v for k, v in self.score(xs, ls).items()})
        return row


@register_model("order", norms=("none", "layer"))
def order(dataset, norm: str, dim: int = 64, word_dim: int = 32, image_hidden: int = 128):
    """Order embeddings (``layernorm_paper.models.OrderEmbedding``) on "digit-captions"; the caption
    encoder a GRU (norm "none") or LN-GRU ("layer")."""
    if getattr(dataset, "x_val", None) is None or "captions_per_image" not in dataset.info:
        raise ValueError(f"order expects a caption dataset with a validation split, received "
                         f"{dataset.name!r}. Use 'digit-captions'.")
    model = OrderEmbedding(dataset.vocab_size, PIXELS, dim, word_dim, image_hidden, norm=norm)
    splits = {"val": (dataset.x_val, dataset.lengths_val),
              "test": (dataset.x_test, dataset.lengths_test)}
    return OrderForRunner(model, splits, dataset.info["captions_per_image"])


def best_validation(rows: list[dict]) -> dict:
    """The metrics row of the best validation model: the first row with the highest
    ``val_c2i_rsum`` (caption -> image R@1 + R@5 + R@10 on the validation images, Vendrov et
    al.'s criterion). Its ``step`` is the updates to the best validation model, its ``test_*``
    fields that model's test scores."""
    scored = [r for r in rows if SELECTION in r]
    if not scored:
        raise ValueError(f"best_validation needs metrics rows with {SELECTION!r} (rows of a "
                         f"paper_order run), received {len(rows)} rows without it.")
    return max(scored, key=lambda r: (r[SELECTION], -r["step"]))


# The experiment (configs, tier, claims, the paper's numbers), registered by
# ``reproduce.experiments``: ``layernorm_paper.records.paper_order``; its configs
# keep their name here.
from ..records.paper_order import configs as paper_order  # noqa: E402,F401

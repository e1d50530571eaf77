"""Order embeddings for caption-image retrieval (Vendrov et al. 2016), with a GRU or LN-GRU
caption encoder (the paper's section 6.1).

Captions and images map into the non-negative orthant, ``|l2norm(.)|``: a caption by the last
hidden state of a ``layernorm.GRU`` over its word embeddings, an image by a linear map (or a
small MLP) of its features. A caption is more abstract than its image, so it should lie below it
in the reversed product order (caption <= image in every coordinate); the order-violation
penalty

    E(s, i) = || max(0, s - i) ||^2              0 exactly when s <= i elementwise

scores a (caption s, image i) pair, lower = better. Training minimizes the contrastive max-margin
loss over a batch of matching pairs (s_n, i_n), every other pair of the batch a negative in both
directions:

    sum_n [ sum_{j != n} max(0, margin - E(s_n, i_j) + E(s_n, i_n))       contrastive images
          + sum_{j != n} max(0, margin - E(s_j, i_n) + E(s_n, i_n)) ]     contrastive captions

with margin 0.05, as Vendrov et al.'s code. Retrieval ranks by E: caption -> image (the paper's
"image retrieval") and image -> caption ("caption retrieval", the best-ranked of the image's
captions), scored by Recall@K (``retrieval_metrics``).

Reduced form (how it differs from the paper's model on MS-COCO: 1024-d GRU over 300-d word
embeddings, 4096-d VGG image features, Adam 1e-3, batch 128, gradient clip 2): the dimensions
are small and the image features are an 8x8 digit's pixels, hence the optional hidden layer in
the image encoder (``image_hidden``) where a CNN's features would have been.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

from layernorm.rnn import GRU

MARGIN = 0.05       # Vendrov et al.'s margin for order embeddings


def order_violation(s: torch.Tensor, im: torch.Tensor) -> torch.Tensor:
    """E(s, i) = ||max(0, s - i)||^2 over the last dimension, broadcasting the others."""
    return F.relu(s - im).pow(2).sum(-1)


def violation_matrix(s: torch.Tensor, im: torch.Tensor, chunk: int | None = None) -> torch.Tensor:
    """(Nc, Ni) matrix of E(s_c, i_j) for captions s (Nc, D) and images im (Ni, D), computed
    ``chunk`` captions at a time (default: about 2^17 elements of the broadcast difference per
    chunk, which stays in the cache; all pairs at once would be Nc*Ni*D)."""
    if s.dim() != 2 or im.dim() != 2 or s.shape[1] != im.shape[1]:
        raise ValueError(f"violation_matrix expected captions (Nc, D) and images (Ni, D) of one "
                         f"D, received {tuple(s.shape)} and {tuple(im.shape)}.")
    if not len(s):
        return s.new_zeros(0, len(im))
    chunk = chunk or max(1, 2 ** 17 // max(1, im.numel()))
    return torch.cat([order_violation(s[a:a + chunk, None, :], im[None])
                      for a in range(0, len(s), chunk)])


def contrastive_loss(s: torch.Tensor, im: torch.Tensor, margin: float = MARGIN) -> torch.Tensor:
    """Per-pair contrastive loss (N,) of matching pairs (s_n, i_n): the hinges of pair n's
    contrastive images (row n) and contrastive captions (column n). Its sum over the batch is
    Vendrov et al.'s loss."""
    if s.shape != im.shape or s.dim() != 2:
        raise ValueError(f"contrastive_loss expected matching pairs, captions and images of one "
                         f"shape (N, D), received {tuple(s.shape)} and {tuple(im.shape)}.")
    e = violation_matrix(s, im)                                          # (N, N)
    pos = e.diagonal()
    off = ~torch.eye(len(e), dtype=torch.bool, device=e.device)
    wrong_image = F.relu(margin - e + pos[:, None]) * off                # caption n vs image j
    wrong_caption = F.relu(margin - e + pos[None, :]) * off              # caption j vs image n
    return wrong_image.sum(1) + wrong_caption.sum(0)


def _l2norm_abs(x: torch.Tensor) -> torch.Tensor:
    return F.normalize(x, dim=-1).abs()


class OrderEmbedding(nn.Module):
    """Caption and image encoders into a shared ``dim``-dimensional order-embedding space.

    ``encode_captions(tokens (N, T) int64, lengths (N,)) -> (N, dim)``, ``encode_images(images
    (M, image_size) float) -> (M, dim)``, both ``|l2norm(.)|``. ``forward(tokens, lengths,
    images)`` -> the per-pair contrastive loss (N,) of matching pairs. norm: the caption GRU's,
    "none" (torch's GRU) or "layer" (LN-GRU); token id 0 is padding.
    """

    def __init__(self, vocab_size: int, image_size: int, dim: int = 64, word_dim: int = 32,
                 image_hidden: int = 0, norm: str = "layer", margin: float = MARGIN) -> None:
        super().__init__()
        if norm not in ("none", "layer"):
            raise ValueError(f"OrderEmbedding's caption encoder takes norm 'none' (GRU) or "
                             f"'layer' (LN-GRU), received {norm!r}.")
        for name, value in (("vocab_size", vocab_size), ("image_size", image_size),
                            ("dim", dim), ("word_dim", word_dim)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"OrderEmbedding needs {name} a positive int, received "
                                 f"{value!r}.")
        self.norm, self.margin = norm, float(margin)
        self.embed = nn.Embedding(vocab_size, word_dim, padding_idx=0)
        self.gru = GRU(word_dim, dim, batch_first=True, norm=norm)
        self.image = (nn.Linear(image_size, dim) if not image_hidden else
                      nn.Sequential(nn.Linear(image_size, image_hidden), nn.ReLU(),
                                    nn.Linear(image_hidden, dim)))

    def encode_captions(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        if tokens.dim() != 2 or lengths.shape != tokens.shape[:1]:
            raise ValueError(f"encode_captions expected tokens (N, T) and lengths (N,), received "
                             f"{tuple(tokens.shape)} and {tuple(lengths.shape)}.")
        lengths = lengths.to("cpu", torch.int64)
        if len(lengths) and (int(lengths.min()) < 1 or int(lengths.max()) > tokens.shape[1]):
            raise ValueError(f"encode_captions expected lengths in 1..{tokens.shape[1]}, received "
                             f"{int(lengths.min())}..{int(lengths.max())}.")
        packed = pack_padded_sequence(self.embed(tokens), lengths, batch_first=True,
                                      enforce_sorted=False)
        _, h_n = self.gru(packed)                                         # (1, N, dim)
        return _l2norm_abs(h_n[-1])

    def encode_images(self, images: torch.Tensor) -> torch.Tensor:
        return _l2norm_abs(self.image(images))

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor,
                images: torch.Tensor) -> torch.Tensor:
        return contrastive_loss(self.encode_captions(tokens, lengths), self.encode_images(images),
                                self.margin)


# ----------------------------------------------------------------------------- retrieval
def _hit_probability(better: torch.Tensor, tied_other: torch.Tensor, tied_own: torch.Tensor,
                     k: int) -> torch.Tensor:
    """P(a relevant item is in the top k) when ``better`` irrelevant items score strictly better
    than the best relevant one, and ``tied_other`` irrelevant and ``tied_own`` relevant items tie
    with it, the tie broken uniformly at random: 1 - C(o, m) / C(o + r, m) with m = k - better
    free places (0 when m <= 0, 1 when m > o)."""
    m = (k - better).clamp(min=0).double()
    o, t = tied_other.double(), (tied_other + tied_own).double()
    mm = torch.minimum(m, o)
    miss = torch.exp(torch.lgamma(o + 1) - torch.lgamma(o - mm + 1) - torch.lgamma(t + 1)
                     + torch.lgamma(t - mm + 1))
    return torch.where(m > o, torch.ones_like(m), torch.where(m <= 0, torch.zeros_like(m),
                                                              1 - miss))


def _rank_stats(scores: torch.Tensor, own: torch.Tensor, ks) -> dict:
    """Queries in rows of ``scores`` (lower = better), relevant items where ``own`` is True:
    {R@k (percent), mean rank of the best relevant item}, ties broken uniformly at random."""
    best = torch.where(own, scores, torch.full_like(scores, float("inf"))).min(1).values
    better = (scores < best[:, None]).sum(1)
    tie = scores == best[:, None]
    tied_own, tied_other = (tie & own).sum(1), (tie & ~own).sum(1)
    out = {f"r{k}": 100.0 * float(_hit_probability(better, tied_other, tied_own, k).mean())
           for k in ks}
    # the first relevant item of a random arrangement of t tied items, r relevant: (t+1)/(r+1)
    t = (tied_own + tied_other).double()
    out["meanr"] = float((better.double() + (t + 1) / (tied_own.double() + 1)).mean())
    return out


def retrieval_metrics(violations: torch.Tensor, image_of_caption: torch.Tensor,
                      ks=(1, 5, 10)) -> dict:
    """Recall@K and mean rank both ways from the (captions, images) matrix of violations E.

    ``c2i_r{k}``: % of captions whose own image is among the k images of lowest E (the paper's
    "image retrieval"); ``i2c_r{k}``: % of images with one of their own captions among the k
    captions of lowest E ("caption retrieval"); ``c2i_meanr`` / ``i2c_meanr``: mean rank (1 =
    first) of the own image / of the best-ranked own caption. Exact ties count as a random
    tie-break would in expectation (a collapsed embedding that ties everything scores chance).
    """
    nc, ni = violations.shape
    if image_of_caption.shape != (nc,):
        raise ValueError(f"retrieval_metrics expected image_of_caption ({nc},) for {nc} "
                         f"captions, received {tuple(image_of_caption.shape)}.")
    own = image_of_caption[:, None] == torch.arange(ni, device=violations.device)   # (Nc, Ni)
    c2i = _rank_stats(violations, own, ks)
    i2c = _rank_stats(violations.t(), own.t(), ks)
    return {**{f"c2i_{k}": v for k, v in c2i.items()}, **{f"i2c_{k}": v for k, v in i2c.items()}}


def split_order_loss(violations: torch.Tensor, image_of_caption: torch.Tensor,
                     margin: float = MARGIN) -> float:
    """Mean hinge max(0, margin - E(negative) + E(positive)) over every (true pair, negative) of
    a split, both directions (contrastive images of each caption, contrastive captions of each
    image), averaged over the two: the training loss in a form independent of the batch size."""
    nc, ni = violations.shape
    own = image_of_caption[:, None] == torch.arange(ni, device=violations.device)
    pos = violations.gather(1, image_of_caption[:, None])                       # (Nc, 1)
    images = (F.relu(margin - violations + pos) * ~own).sum() / (~own).sum().clamp(min=1)
    total, count = violations.new_zeros(()), 0
    for j in range(ni):           # each caption of image j against every caption of the others
        mine = own[:, j]
        hinge = F.relu(margin - violations[~mine, j][None, :] + violations[mine, j][:, None])
        total, count = total + hinge.sum(), count + hinge.numel()
    return 0.5 * float(images) + 0.5 * float(total / max(count, 1))

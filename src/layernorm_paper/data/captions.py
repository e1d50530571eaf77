"""Digit captions: sklearn's 8x8 digits paired with generated token captions, for caption-image
retrieval with order embeddings (the paper's section 6.1, in reduced form; docs/reproduce.md).

Each image gets ``n_captions`` captions such as ``a thick seven , upper left`` or ``leaning
right , the 7 , wide and faint``. A caption always names the digit and mentions a random subset
(1 to 3) of four properties measured on the image, each in three levels given by the tertiles
of the property within the image's digit class (so a property says something the digit does
not):

    thickness  ink mass (sum of grey levels)             thin / (regular) / thick
    width      horizontal spread of the ink              narrow / (medium) / wide
    slant      shear of the second moments, -mu11/mu02   leaning left / upright / leaning right
    position   ink centroid, vertical x horizontal       upper left ... centered ... lower right

Synonyms, determiners and word order are drawn at random, so a caption is not a fixed lookup of
the image's properties, and several images share each description: retrieval is ambiguous by
construction (R@1 stays well below 100% even for a perfect model), while R@10 can approach it.

``digit-captions`` rows are (image, caption) pairs: x (N, 64 + L) int64 holds the image's 64 grey
levels (0..16, sklearn's values) and then the caption's token ids (0 = padding), lengths (N,) the
caption lengths. Splits are by image (no image in two splits); the validation and test splits
list their rows image-major, ``n_captions`` consecutive rows per image. Targets are zeros (task
"regress", the runner's form of a model returning its own loss; see
``layernorm_paper.models.paper``). Deterministic given ``seed``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .embedded import _digits_arrays
from .registry import Dataset, register_dataset

PIXELS = 64
GREY_LEVELS = 16            # sklearn's digits: integer grey levels 0..16
PAD = 0                     # token id of padding
DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")

# three levels per property: the words that say each level (None: the level may go unsaid)
THICKNESS = (("thin", "light", "faint"), ("regular", "medium", "normal"), ("thick", "bold", "heavy"))
WIDTH = (("narrow", "slim"), ("mid-width",), ("wide", "broad"))
SLANT = ((("leaning", "left"), ("slanted", "left"), ("tilted", "left")),
         (("upright",), ("straight",)),
         (("leaning", "right"), ("slanted", "right"), ("tilted", "right")))
VERTICAL = (("upper", "top"), None, ("lower", "bottom"))
HORIZONTAL = ("left", None, "right")
DETERMINERS = ("a", "the", "one", "")
PROPERTIES = ("thickness", "width", "slant", "position")


@dataclass
class CaptionDataset(Dataset):
    """A ``Dataset`` with a validation split (for choosing the best model) beside train / test.

    x_val, y_val, lengths_val: as the test split's; ``info["captions_per_image"]`` rows per image,
    image-major, in the validation and test splits; ``vocab`` (list): the word of each token id.
    """

    x_val: torch.Tensor | None = None
    y_val: torch.Tensor | None = None
    lengths_val: torch.Tensor | None = None
    vocab: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.x_val is not None and len(self.x_val) != len(self.y_val):
            raise ValueError(f"dataset {self.name!r}: x_val has {len(self.x_val)} examples but "
                             f"y_val has {len(self.y_val)}.")

    def decode(self, tokens) -> str:
        """The caption of a row's token ids (padding dropped)."""
        return " ".join(self.vocab[int(t)] for t in tokens if int(t) != PAD)


def image_properties(grey: np.ndarray, labels: np.ndarray) -> dict[str, np.ndarray]:
    """Per image: the level (0, 1, 2) of thickness, width and slant, and of the centroid's
    vertical and horizontal position, each by the tertiles of its raw value within the image's
    digit class. grey: (N, 64) grey levels."""
    img = grey.reshape(-1, 8, 8).astype(np.float64)
    mass = img.sum((1, 2))
    rows, cols = np.mgrid[0:8, 0:8].astype(np.float64)
    w = img / np.maximum(mass, 1e-9)[:, None, None]
    cy, cx = (w * rows).sum((1, 2)), (w * cols).sum((1, 2))
    dy, dx = rows - cy[:, None, None], cols - cx[:, None, None]
    mu20, mu02, mu11 = (w * dx ** 2).sum((1, 2)), (w * dy ** 2).sum((1, 2)), (w * dx * dy).sum((1, 2))
    raw = {"thickness": mass, "width": np.sqrt(mu20), "slant": -mu11 / np.maximum(mu02, 1e-9),
           "vertical": cy, "horizontal": cx}       # slant > 0: the top leans right (rows go down)
    levels = {}
    for name, value in raw.items():
        lv = np.empty(len(value), np.int64)
        for digit in np.unique(labels):
            sel = labels == digit
            lo, hi = np.quantile(value[sel], [1 / 3, 2 / 3])
            lv[sel] = (value[sel] > lo).astype(np.int64) + (value[sel] > hi)
        levels[name] = lv
    return levels


def _pick(options, rng: np.random.Generator):
    return options[int(rng.integers(len(options)))]


def _position_words(v: int, h: int, rng: np.random.Generator) -> list[str]:
    vert, horiz = VERTICAL[v], HORIZONTAL[h]
    if vert is None and horiz is None:
        return list(_pick([("centered",), ("in", "the", "middle"), ("in", "the", "center")], rng))
    if vert is None:
        return list(_pick([(horiz,), ("on", "the", horiz), ("to", "the", horiz)], rng))
    word = _pick(vert, rng)
    if horiz is None:
        return list(_pick([(word,), ("at", "the", "top" if v == 0 else "bottom")], rng))
    return [word, horiz] if rng.random() < 0.7 else ["in", "the", word, horiz]


def caption_words(digit: int, props: dict[str, int], rng: np.random.Generator) -> list[str]:
    """One caption (a list of words) for an image of ``digit`` with property levels ``props``."""
    chosen = [PROPERTIES[j] for j in sorted(rng.permutation(len(PROPERTIES))[:rng.integers(1, 4)])]
    adjectives, phrases = [], []
    for p in chosen:
        if p == "thickness":
            adjectives.append(_pick(THICKNESS[props["thickness"]], rng))
        elif p == "width":
            adjectives.append(_pick(WIDTH[props["width"]], rng))
        elif p == "slant":
            phrases.append(list(_pick(SLANT[props["slant"]], rng)))
        else:
            phrases.append(_position_words(props["vertical"], props["horizontal"], rng))
    rng.shuffle(adjectives)
    rng.shuffle(phrases)
    form = int(rng.integers(4))
    noun = [[DIGIT_WORDS[digit]], [str(digit)], ["digit", DIGIT_WORDS[digit]],
            ["number", str(digit)]][form]
    det = [] if form >= 2 else [w for w in [_pick(DETERMINERS, rng)] if w]
    style = int(rng.integers(3)) if adjectives or phrases else 0
    if style == 1 and adjectives:                  # "the seven , thick and wide , upper left"
        words = det + noun + [","] + " and ".join(adjectives).split()
    else:                                          # "a thick wide seven ..."
        words = det + adjectives + noun
    if style == 2 and phrases:                     # "upper left , a thick seven , ..."
        words = phrases[0] + [","] + words
        phrases = phrases[1:]
    for ph in phrases:
        words = words + [","] + ph
    return words


def _vocabulary() -> tuple[str, ...]:
    """Every word a caption can hold, id 0 = padding: a fixed table, so ids never depend on which
    captions were drawn."""
    words = set(DIGIT_WORDS) | {str(d) for d in range(10)} | set(DETERMINERS) - {""}
    words |= {"digit", "number", ",", "and", "in", "the", "on", "to", "at", "centered", "middle",
              "center", "top", "bottom"}
    for table in (THICKNESS, WIDTH):
        words |= {w for level in table for w in level}
    words |= {w for level in SLANT for option in level for w in option}
    words |= {w for v in VERTICAL if v for w in v} | {h for h in HORIZONTAL if h}
    return ("<pad>",) + tuple(sorted(words))


VOCAB = _vocabulary()


def _digit_captions(n_captions: int = 5, n_val: int = 300, n_test: int = 300,
                    seed: int = 0) -> CaptionDataset:
    """The digit-captions pairs (module docstring): images split into train / ``n_val`` /
    ``n_test``, ``n_captions`` captions drawn per image; every draw from a numpy generator seeded
    with ``seed``."""
    x, labels = _digits_arrays()
    grey = np.rint(x * GREY_LEVELS).astype(np.int64)                   # sklearn's grey levels
    n = len(grey)
    if n_captions < 1 or n_val < 1 or n_test < 1 or n_val + n_test >= n:
        raise ValueError(f"digit-captions needs n_captions >= 1, n_val >= 1, n_test >= 1 and "
                         f"n_val + n_test < {n} images, received n_captions={n_captions}, "
                         f"n_val={n_val}, n_test={n_test}.")
    rng = np.random.default_rng(seed)
    order = rng.permutation(n)
    splits = {"val": order[:n_val], "test": order[n_val:n_val + n_test],
              "train": order[n_val + n_test:]}
    levels = image_properties(grey, labels)
    index = {w: i for i, w in enumerate(VOCAB)}
    captions = [[[index[w] for w in caption_words(int(labels[i]), {k: int(v[i]) for k, v in
                  levels.items()}, rng)] for _ in range(n_captions)] for i in range(n)]
    length = max(len(c) for per_image in captions for c in per_image)

    def rows(images: np.ndarray):
        xs = np.zeros((len(images) * n_captions, PIXELS + length), np.int64)
        lens = np.zeros(len(images) * n_captions, np.int64)
        for r, (i, k) in enumerate((i, k) for i in images for k in range(n_captions)):
            xs[r, :PIXELS] = grey[i]
            xs[r, PIXELS:PIXELS + len(captions[i][k])] = captions[i][k]
            lens[r] = len(captions[i][k])
        return torch.from_numpy(xs), torch.from_numpy(lens), torch.zeros(len(xs))

    (xtr, ltr, ytr), (xva, lva, yva), (xte, lte, yte) = (rows(splits[s]) for s in
                                                         ("train", "val", "test"))
    return CaptionDataset(
        "digit-captions", "regress", xtr, ytr, xte, yte, vocab_size=len(VOCAB),
        tolerance=float("inf"), lengths_train=ltr, lengths_test=lte, x_val=xva, y_val=yva,
        lengths_val=lva, vocab=VOCAB,
        info={"source": "sklearn.datasets.load_digits with generated captions", "pixels": PIXELS,
              "grey_levels": GREY_LEVELS, "max_caption_len": length,
              "captions_per_image": n_captions, "images": {s: len(v) for s, v in splits.items()},
              "seed": seed, "targets": "zeros: the runner trains a model returning its own "
              "loss (layernorm_paper.reproduce.order); test_error is unused (always 0)"})


register_dataset("digit-captions", description="sklearn 8x8 digits paired with generated token "
                 "captions, for caption-image retrieval (order embeddings, section 6.1)",
                 embedded=True)(_digit_captions)

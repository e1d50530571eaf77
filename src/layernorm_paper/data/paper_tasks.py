"""Embedded data for the reduced forms of the paper's section 6 experiments (docs/reproduce.md).

    digits-binary  sklearn's 8x8 digits binarized at 0.5, (N, 64) in {0, 1}: DRAW (6.4)
    pen-strokes    generated handwriting-like pen trajectories (N, T, 3) = (dx, dy, end of
                   stroke): the mixture-density LSTM (6.5)
    cloze          a generated cloze task: passages of (entity, relation, entity) facts with
                   entities anonymised per example, a query with the answer blanked (6.2)

All are deterministic functions of their arguments (numpy generators seeded from ``seed``).

digits-binary and pen-strokes are density-modelling data: there is no label. Their targets are
zeros and their task is "regress", the form in which the runner trains a model whose output is
``sqrt(loss)`` of each example (``layernorm_paper.models.paper``): the runner's squared error is
then exactly the model's loss (nats). Their ``test_error`` counts nothing (tolerance inf).
"""
from __future__ import annotations

import numpy as np
import torch

from .embedded import _digits_arrays, split_indices
from .registry import Dataset, register_dataset

LOSS_TARGETS = ("targets are zeros: a model trained by the runner outputs sqrt(loss) per example, "
                "so test_loss is its mean loss in nats; test_error is unused (always 0)")


def _digits_binary(threshold: float = 0.5, test_fraction: float = 0.2,
                   split_seed: int = 0) -> Dataset:
    """Binarized 8x8 digits (a pixel is 1 where its grey value exceeds ``threshold``)."""
    x, y = _digits_arrays()
    xb = (x > threshold).astype(np.float32)
    tr, te = split_indices(len(y), test_fraction, split_seed)
    return Dataset("digits-binary", "regress", torch.from_numpy(xb[tr]),
                   torch.zeros(len(tr)), torch.from_numpy(xb[te]), torch.zeros(len(te)),
                   tolerance=float("inf"),
                   info={"source": "sklearn.datasets.load_digits, binarized", "threshold":
                         threshold, "pixels": 64, "targets": LOSS_TARGETS})


register_dataset("digits-binary", description="sklearn 8x8 digits binarized at 0.5 (density "
                 "modelling: DRAW, section 6.4)", embedded=True)(_digits_binary)


# ----------------------------------------------------------------------------- pen strokes
def _glyph_templates(n_glyphs: int, rng: np.random.Generator) -> list[tuple[np.ndarray, ...]]:
    """Each glyph: amplitudes, frequencies and phases of a smooth closed-ish curve."""
    return [(rng.uniform(0.5, 1.5, 2), rng.integers(1, 4, 2).astype(float),
             rng.uniform(0, 2 * np.pi, 2), int(rng.integers(8, 20))) for _ in range(n_glyphs)]


def _stroke_sequence(length: int, templates, rng: np.random.Generator) -> np.ndarray:
    """(length, 3) offsets (dx, dy, eos) of glyphs written one after the other, left to right.
    A glyph is one stroke of its template's curve with random slant, size and jitter; the pen
    lifts (eos = 1) on its last point and the next point jumps to the next glyph's start."""
    points, pen = [], []
    x0 = 0.0
    while len(points) < length + 1:
        amp, freq, phase, n = templates[int(rng.integers(len(templates)))]
        scale, slant = rng.uniform(0.8, 1.2), rng.uniform(-0.3, 0.3)
        t = np.linspace(0, 1, n)
        gy = scale * amp[1] * np.sin(2 * np.pi * freq[1] * t + phase[1])
        gx = x0 + scale * (amp[0] * np.sin(2 * np.pi * freq[0] * t + phase[0]) + 1.5 * t) \
            + slant * gy
        gx = gx + rng.normal(0, 0.02, n)
        gy = gy + rng.normal(0, 0.02, n)
        points += list(zip(gx, gy))
        pen += [0] * (n - 1) + [1]
        x0 = gx.max() + rng.uniform(0.5, 1.0)
    xy = np.asarray(points[:length + 1])
    d = np.diff(xy, axis=0)                                  # (length, 2)
    return np.concatenate([d, np.asarray(pen[1:length + 1], float)[:, None]], axis=1)


def _pen_strokes(length: int = 100, n_train: int = 256, n_test: int = 64, n_glyphs: int = 10,
                 seed: int = 0) -> Dataset:
    """Generated pen trajectories: sequences of ``length`` points (dx, dy, end_of_stroke), glyphs
    drawn from ``n_glyphs`` fixed curve templates; offsets scaled to unit standard deviation (by
    the training split's statistic)."""
    if length < 2 or n_train < 1 or n_test < 1:
        raise ValueError(f"pen-strokes needs length >= 2, n_train >= 1, n_test >= 1, received "
                         f"length={length}, n_train={n_train}, n_test={n_test}.")
    rng = np.random.default_rng(seed)
    templates = _glyph_templates(n_glyphs, rng)
    seqs = np.stack([_stroke_sequence(length, templates, rng) for _ in range(n_train + n_test)])
    scale = seqs[:n_train, :, :2].std()
    seqs[:, :, :2] /= scale
    x = torch.from_numpy(seqs.astype(np.float32))
    return Dataset("pen-strokes", "regress", x[:n_train], torch.zeros(n_train), x[n_train:],
                   torch.zeros(n_test), tolerance=float("inf"),
                   info={"source": "generated", "length": length, "n_glyphs": n_glyphs,
                         "offset_scale": float(scale), "seed": seed, "targets": LOSS_TARGETS})


register_dataset("pen-strokes", description="generated pen trajectories (dx, dy, end of stroke) "
                 "for handwriting-style sequence generation (section 6.5)",
                 embedded=True)(_pen_strokes)


# ----------------------------------------------------------------------------- cloze
def _cloze(n_entities: int = 10, n_relations: int = 4, n_facts: int = 6, n_train: int = 4000,
           n_test: int = 500, seed: int = 0) -> Dataset:
    """A generated cloze task in the form of the CNN corpus questions (Hermann et al. 2015).

    Passage: ``n_facts`` facts ``e_a r_k e_b .`` (4 tokens each), no two with the same (head,
    relation). Query: ``e_a r_k @placeholder``; answer: ``e_b`` of that fact. Entities are
    anonymised per example (a random permutation of the entity ids), so only reading the passage
    answers the query. Tokens: entities 0..E-1, relations E..E+R-1, then ".", "@placeholder".
    x: (N, 4 * n_facts + 3) int64 ids, passage then query; y: (N,) the answer's entity id.
    """
    if n_facts > n_entities * n_relations:
        raise ValueError(f"cloze needs n_facts <= n_entities * n_relations (distinct (head, "
                         f"relation) pairs), received n_facts={n_facts}, n_entities={n_entities},"
                         f" n_relations={n_relations}.")
    rng = np.random.default_rng(seed)
    E, R = n_entities, n_relations
    dot, blank = E + R, E + R + 1
    n = n_train + n_test
    x = np.empty((n, 4 * n_facts + 3), np.int64)
    y = np.empty(n, np.int64)
    for i in range(n):
        names = rng.permutation(E)                                 # anonymisation
        pairs = rng.choice(E * R, n_facts, replace=False)          # distinct (head, relation)
        heads, rels = pairs // R, pairs % R
        tails = rng.integers(0, E, n_facts)
        facts = np.stack([names[heads], E + rels, names[tails], np.full(n_facts, dot)], 1)
        q = int(rng.integers(n_facts))
        x[i, :4 * n_facts] = facts.reshape(-1)
        x[i, 4 * n_facts:] = (names[heads[q]], E + rels[q], blank)
        y[i] = names[tails[q]]
    t = torch.from_numpy
    return Dataset("cloze", "classify", t(x[:n_train]), t(y[:n_train]), t(x[n_train:]),
                   t(y[n_train:]), num_classes=E, vocab_size=E + R + 2,
                   info={"source": "generated", "passage_len": 4 * n_facts, "query_len": 3,
                         "n_entities": E, "n_relations": R, "n_facts": n_facts, "seed": seed})


register_dataset("cloze", description="generated cloze questions over passages of anonymised "
                 "entity facts (attentive reader, section 6.2)", embedded=True)(_cloze)

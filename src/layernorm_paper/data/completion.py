"""A sentence-completion test in the format of the MSR Sentence Completion Challenge (Zweig &
Burges 2011), built from the held-out docstrings of the running Python's standard library.

Each question is a held-out sentence with one word blanked and five candidate words: the word
that was there and four impostors of the same frequency band. A language model answers by
scoring each of the five completed sentences (its total log-likelihood) and picking the best;
chance is 1/5.

    questions, info = completion_test(max_chars=200_000, n_questions=100)
    q = questions[0]
    sentences = [q["left"] + w + q["right"] for w in q["candidates"]]   # answer: q["answer"]

How it is built (deterministic: the same Python standard library and arguments give the same
test, whose SHA-256 ``info["sha256"]`` names it):

* Text: the docstring corpus of ``layernorm_paper.data.docstrings`` with the same ``max_chars`` and
  ``test_every``; questions come from its test split only (docstrings ``i % test_every == 0``,
  which the language model never trains on); word counts from its training split only.
* Sentences: each held-out docstring's paragraphs (blank-line separated) that read as prose (no
  doctest ``>>>`` lines, no indented lines), lines joined by spaces, split after ``.``, ``!`` or
  ``?`` followed by a capital; kept when they start with a capital letter, end with ``.``, have
  ``min_words`` to ``max_words`` words, at most ``max_length`` characters, and only letters,
  spaces and ``,.;'-``. Duplicates are dropped, and so is a sentence that also occurs in the
  training text (the standard library repeats some docstrings).
* Blank: the sentence's lowest-frequency lowercase word of >= 3 letters whose training count is
  at least ``min_count`` (MSR blanked a low-frequency focus word), the first such on ties.
* Impostors: 4 lowercase words of the same frequency band, ``floor(log2(count))`` of their
  training counts, that do not occur in the sentence; drawn with ``numpy.random.default_rng(seed)``
  from the band's words in sorted order. Questions whose band has fewer than 4 such words are
  skipped. The five candidates are shuffled by the same generator.
* Selection: ``n_questions`` of the eligible sentences, evenly spaced over them in corpus order
  (all of them when there are fewer).

Unlike MSR's questions (Sherlock Holmes novels, impostors proposed by an n-gram model and
filtered by people so that only one fits), the impostors here are not filtered: some may also
fit the sentence, which lowers the accuracy any model can reach.
"""
from __future__ import annotations

import functools
import hashlib
import json
import math
import re

import numpy as np

from .docstrings import stdlib_docstrings

CANDIDATES = 5
CHANCE = 1 / CANDIDATES
_WORD = re.compile(r"[A-Za-z]+")
_PROSE = re.compile(r"[A-Za-z ,.;'-]+")
_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")


def word_counts(text: str) -> dict[str, int]:
    """Case-sensitive counts of the alphabetic words of ``text``."""
    counts: dict[str, int] = {}
    for w in _WORD.findall(text):
        counts[w] = counts.get(w, 0) + 1
    return counts


def band(count: int) -> int:
    """The frequency band of a word seen ``count`` times: floor(log2(count))."""
    return int(math.floor(math.log2(count)))


def prose_sentences(doc: str, *, min_words: int = 6, max_words: int = 25,
                    max_length: int = 100) -> list[str]:
    """The sentences of one docstring that read as prose (see module)."""
    out = []
    for para in doc.split("\n\n"):
        lines = para.split("\n")
        if any(ln.startswith((" ", "\t", ">>>")) for ln in lines):
            continue
        for s in _SPLIT.split(" ".join(ln.strip() for ln in lines if ln.strip())):
            s = s.strip()
            if (s[:1].isupper() and s.endswith(".") and len(s) <= max_length
                    and min_words <= len(s.split()) <= max_words and _PROSE.fullmatch(s)):
                out.append(s)
    return out


def _question(sentence: str, counts: dict[str, int], by_band: dict[int, list[str]],
              min_count: int, rng: np.random.Generator) -> dict | None:
    spans = [m for m in _WORD.finditer(sentence)
             if m.group().islower() and len(m.group()) >= 3
             and counts.get(m.group(), 0) >= min_count]
    if not spans:
        return None
    focus = min(spans, key=lambda m: counts[m.group()])     # first of the rarest
    word = focus.group()
    present = set(_WORD.findall(sentence))
    pool = [w for w in by_band[band(counts[word])] if w not in present]
    if len(pool) < CANDIDATES - 1:
        return None
    impostors = [pool[i] for i in rng.choice(len(pool), CANDIDATES - 1, replace=False)]
    candidates = [word] + impostors
    order = rng.permutation(CANDIDATES)
    return {"left": sentence[:focus.start()], "right": sentence[focus.end():],
            "candidates": [candidates[i] for i in order],
            "answer": int(np.flatnonzero(order == 0)[0]), "count": counts[word],
            "band": band(counts[word])}


def build_questions(train_text: str, held_out: list[str], *, n_questions: int, seed: int,
                    min_count: int, min_words: int, max_words: int,
                    max_length: int) -> tuple[list[dict], int]:
    """(questions, number of held-out sentences): the 5-way questions of the held-out texts
    ``held_out``, word counts and impostors from ``train_text`` (the rules of the module)."""
    counts = word_counts(train_text)
    by_band: dict[int, list[str]] = {}
    for w in sorted(counts):
        if w.islower() and len(w) >= 3 and counts[w] >= min_count:
            by_band.setdefault(band(counts[w]), []).append(w)
    # a held-out sentence that also occurs in the training text (whitespace runs as one space)
    # is dropped
    seen_in_training = " ".join(train_text.split())
    sentences, seen = [], set()
    for doc in held_out:
        for s in prose_sentences(doc, min_words=min_words, max_words=max_words,
                                 max_length=max_length):
            if s not in seen and s not in seen_in_training:
                seen.add(s)
                sentences.append(s)
    rng = np.random.default_rng(seed)
    eligible = [q for q in (_question(s, counts, by_band, min_count, rng) for s in sentences)
                if q is not None]
    if len(eligible) > n_questions:
        keep = np.linspace(0, len(eligible) - 1, n_questions).round().astype(int)
        eligible = [eligible[k] for k in keep]
    return eligible, len(sentences)


@functools.lru_cache(maxsize=8)
def _completion_test(max_chars: int | None, test_every: int, n_questions: int, seed: int,
                     min_count: int, min_words: int, max_words: int,
                     max_length: int) -> tuple[str, dict]:
    docs, corpus = stdlib_docstrings(max_chars)
    train_text = "".join(d + "\n\n" for i, d in enumerate(docs) if i % test_every)
    # the standard library repeats some docstrings: build_questions drops a held-out sentence
    # found in the training text
    eligible, n_sentences = build_questions(
        train_text, [docs[i] for i in range(0, len(docs), test_every)],
        n_questions=n_questions, seed=seed, min_count=min_count, min_words=min_words,
        max_words=max_words, max_length=max_length)
    text = json.dumps(eligible, sort_keys=True, ensure_ascii=False)
    info = {"questions": len(eligible), "candidates": CANDIDATES, "chance": CHANCE,
            "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
            "python": corpus["python"], "corpus_sha256": corpus["sha256"],
            "held_out_sentences": n_sentences, "max_chars": max_chars,
            "test_every": test_every, "seed": seed, "min_count": min_count}
    return text, info


def completion_test(max_chars: int | None = 200_000, *, test_every: int = 10,
                    n_questions: int = 100, seed: int = 0, min_count: int = 5,
                    min_words: int = 6, max_words: int = 25,
                    max_length: int = 100) -> tuple[list[dict], dict]:
    """(questions, info): the 5-way completion test of the docstring corpus (see module).

    Each question: ``left`` + candidate + ``right`` is a completed sentence; ``candidates`` (5
    words), ``answer`` (index of the word that was there), ``count`` / ``band`` (its training
    count and frequency band). info: number of questions, chance (0.2), SHA-256 of the test
    (canonical JSON of the questions), the Python version and corpus SHA-256 it was built from.
    """
    if n_questions < 1 or test_every < 2 or min_count < 1:
        raise ValueError(f"completion_test needs n_questions >= 1, test_every >= 2 and "
                         f"min_count >= 1, received n_questions={n_questions}, "
                         f"test_every={test_every}, min_count={min_count}.")
    text, info = _completion_test(max_chars, test_every, n_questions, seed, min_count,
                                  min_words, max_words, max_length)
    if not info["questions"]:
        raise ValueError(f"the docstring corpus with max_chars={max_chars} holds no held-out "
                         f"sentence that makes a 5-way completion question. Raise max_chars "
                         f"(e.g. 20000) or lower min_count.")
    return json.loads(text), dict(info)


@functools.lru_cache(maxsize=4)
def _novels_test(test_titles: tuple[str, ...], n_questions: int, seed: int, min_count: int,
                 min_words: int, max_words: int, max_length: int) -> tuple[str, dict]:
    from .novels import split_texts
    train, held_out, label = split_texts(test_titles)
    eligible, n_sentences = build_questions(
        "\n".join(train), held_out, n_questions=n_questions, seed=seed, min_count=min_count,
        min_words=min_words, max_words=max_words, max_length=max_length)
    text = json.dumps(eligible, sort_keys=True, ensure_ascii=False)
    info = {"questions": len(eligible), "candidates": CANDIDATES, "chance": CHANCE,
            "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(), "source": label,
            "test_titles": list(test_titles), "held_out_sentences": n_sentences, "seed": seed,
            "min_count": min_count}
    return text, info


def novels_completion_test(n_questions: int = 1000, *, test_titles: tuple[str, ...] | None = None,
                           seed: int = 0, min_count: int = 5, min_words: int = 6,
                           max_words: int = 25, max_length: int = 120
                           ) -> tuple[list[dict], dict]:
    """(questions, info): the 5-way completion test of the held-out novels of the dataset
    ``novels`` (``novels.TEST_TITLES`` unless ``test_titles``), word counts and impostors from
    the other novels, by the rules of the module. Downloads the novels when not cached."""
    from .novels import TEST_TITLES
    if n_questions < 1 or min_count < 1:
        raise ValueError(f"novels_completion_test needs n_questions >= 1 and min_count >= 1, "
                         f"received n_questions={n_questions}, min_count={min_count}.")
    text, info = _novels_test(tuple(test_titles or TEST_TITLES), n_questions, seed, min_count,
                              min_words, max_words, max_length)
    return json.loads(text), dict(info)


def ngram_accuracy(questions: list[dict], train_text: str, order: int = 5,
                   weight: float = 0.6) -> float:
    """The accuracy on ``questions`` of a character n-gram model fitted on ``train_text``: a
    reference point for the test (is it solvable from the training text alone?), not a model of
    the paper. p(c | h) interpolates the orders 1 .. ``order`` with a fixed ``weight`` on each
    longer context seen in training, down to a uniform floor over the training characters + 1;
    each completed sentence is scored by its total log-probability, as the language models are.
    """
    if order < 1 or not 0 < weight < 1:
        raise ValueError(f"ngram_accuracy needs order >= 1 and 0 < weight < 1, received "
                         f"order={order}, weight={weight}.")
    grams: dict[str, int] = {}
    contexts: dict[str, int] = {}
    for n in range(1, order + 1):
        for i in range(len(train_text) - n + 1):
            g = train_text[i:i + n]
            grams[g] = grams.get(g, 0) + 1
            contexts[g[:-1]] = contexts.get(g[:-1], 0) + 1
    floor = 1 / (len(set(train_text)) + 1)

    def logp(s: str) -> float:
        total = 0.0
        for t in range(1, len(s)):
            p = floor
            for n in range(1, min(order, t + 1) + 1):
                h = s[t - n + 1:t]
                seen = contexts.get(h, 0)
                if seen:
                    p = weight * grams.get(h + s[t], 0) / seen + (1 - weight) * p
            total += math.log(p)
        return total

    right = 0
    for q in questions:
        scores = [logp(q["left"] + w + q["right"]) for w in q["candidates"]]
        right += max(range(CANDIDATES), key=scores.__getitem__) == q["answer"]
    return right / max(len(questions), 1)

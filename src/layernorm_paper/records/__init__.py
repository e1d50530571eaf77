"""One record per experiment of the reproduction: each module below holds, side by side, what
one experiment is — the paper's section and claim it tests, its configs per scale, its tier
(the smallest ``layernorm reproduce`` tier that runs it), its budget rule, the paper's settings
and numbers it stands in for, what runs here instead, and the report's catalog lines for its claims.
"summary A" and "summary B" are the two blog summaries the reproduction also checks
(docs/paper.md, section 6).

    mlp_batch_size      6.6   MLP at batch 128 and 4
    mlp_mnist           6.6   the same on the full MNIST (downloaded)
    cnn_batch_size      6.7 + summary B   ConvNet at batch 128, 4, 1
    skip_thoughts       6.3   not run (no stand-in)
    paper_order         6.1   order embeddings
    paper_draw          6.4   DRAW (and its full form on dynamically binarized MNIST)
    paper_reader        6.2   the attentive reader (and its full form on the CNN questions)
    paper_handwriting   6.5   handwriting generation
    paper_charlm        summary B   character-level LM and its 5-way completion test
    novels_charlm       summary B   the same on 19th-century novels (downloaded), its completion test
    rnn_norms           summary B; 6.2 / 6.5   LSTM vs BN-LSTM vs LN-LSTM (rnn_norms and
                        rnn_downloads: the same claims on embedded and on downloaded data)
    rnn_imdb            summary B; 3.1   LSTM vs BN-LSTM vs LN-LSTM on the real IMDb reviews, their
                        hidden-state stability and gradient growth with T
    rnn_pixels_mnist    summary B   the same on permuted pixel-by-pixel MNIST (downloaded; --paper)
    rnn_stability       summary B; 3.1   hidden-state stability on long sequences
    lstm_gain_init      6.2   LN-LSTM gain initialisation
    analysis            5.1 / 5.2   Table 1, curvature, learning-rate decay
    ddp_batch_split     3     the batch split over processes

Importing a record loads neither the runner nor the report, and a record imports nothing of
the report: ``configs`` imports the runner's ``Config`` when it is called (by the runner:
importing ``layernorm_paper.reproduce`` registers every record); ``claims(found, rules)`` is
called by the report, which hands it its rule library (``layernorm_paper.report.claims.rules``)
and lists the claims of every record in ``RECORDS`` order. The models are the runner's, named
by their registry names (``layernorm_paper.models``)."""
from __future__ import annotations

from ._record import (EMBEDDED, FORMER_TIER_NAMES, LEARNING_RATES, PAPER, QUICK, TIER_SCALE,
                      TIERS, TINY, Found, Record, Sweep, arm_name, learning_rates, swept, tuned)
from . import (analysis, cnn_batch_size, ddp_batch_split, lstm_gain_init, mlp_batch_size,
               mlp_mnist, novels_charlm, paper_charlm, paper_draw, paper_handwriting,
               paper_order, paper_reader, rnn_imdb, rnn_norms, rnn_stability, skip_thoughts)
from . import rnn_pixels_mnist

# In the order of the report: its claims, its sections and its "not run" list follow this list.
RECORDS: dict[str, Record] = {r.name: r for r in (
    mlp_batch_size.RECORD, mlp_mnist.RECORD, cnn_batch_size.RECORD, skip_thoughts.RECORD,
    paper_order.RECORD, paper_draw.RECORD, paper_reader.RECORD, paper_handwriting.RECORD,
    paper_charlm.RECORD, novels_charlm.RECORD, rnn_norms.RECORD, rnn_norms.DOWNLOADS,
    rnn_imdb.RECORD, rnn_pixels_mnist.RECORD, rnn_stability.RECORD, lstm_gain_init.RECORD,
    analysis.RECORD, ddp_batch_split.RECORD)}


def run_order() -> tuple[str, ...]:
    """The experiments ``layernorm reproduce`` trains, the longest first (``Record.pack``)."""
    return tuple(r.name for r in sorted((r for r in RECORDS.values() if r.pack is not None),
                                        key=lambda r: r.pack))


def with_tier(tier: str) -> tuple[str, ...]:
    """The experiments of one tier, in ``run_order``."""
    return tuple(n for n in run_order() if RECORDS[n].tier == tier)


def budgets() -> dict[str, dict]:
    """Experiment -> its budget rule ({"rule", "text"}), for the experiments that state one."""
    return {r.name: dict(r.budget) for r in RECORDS.values() if r.budget}


def not_downloaded() -> dict[str, str]:
    """Experiment -> why no scale downloads its paper's data (it runs on a stand-in)."""
    return {r.name: r.not_downloaded for r in RECORDS.values() if r.not_downloaded}


def register_all() -> None:
    """Register every record that has configs with the runner (called once, when
    ``layernorm_paper.reproduce`` is imported)."""
    from ..experiments.registry import register_experiment
    for r in RECORDS.values():
        if r.configs is not None:
            register_experiment(r.name, section=r.section, claim=r.claim,
                                needs_download=r.tier == PAPER)(_with_swept_lr(r))


def _with_swept_lr(r: Record):
    """The record's configs with each arm's learning rate chosen by ``layernorm sweep-lr``
    where it was swept (``_record.tuned``); ``Record.configs`` itself stays the untuned form
    (the sweep's grid is centred on it)."""
    def configs(scale: str) -> list:
        return tuned(r.name, scale, r.configs(scale))
    configs.__doc__ = r.configs.__doc__
    return configs


__all__ = ["EMBEDDED", "FORMER_TIER_NAMES", "LEARNING_RATES", "PAPER", "QUICK", "RECORDS",
           "TIER_SCALE", "TIERS", "TINY", "Found", "Record", "Sweep", "arm_name", "budgets",
           "learning_rates", "not_downloaded", "register_all", "run_order", "swept", "tuned",
           "with_tier"]

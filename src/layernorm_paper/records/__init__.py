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

Adding an experiment is adding one module here: ``discover`` imports every module of this
package (those whose names start with "_" excepted) and lists each ``Record`` it holds at its top
level, in the order of their ``position`` (each record states its own; the report's order and
``layernorm reproduce``'s follow it). The list above is a summary (``layernorm list`` prints the
registered experiments).

Importing a record loads neither the runner nor the report, and a record imports nothing of
the report: ``configs`` imports the runner's ``Config`` when it is called (by the runner:
importing ``layernorm_paper.reproduce`` registers every record); ``claims(found, rules)`` is
called by the report, which hands it its rule library (``layernorm_paper.report.claims.rules``)
and lists the claims of every record in ``RECORDS`` order. The models are the runner's, named
by their registry names (``layernorm_paper.models``)."""
from __future__ import annotations

import importlib
import pkgutil

from ._record import (EMBEDDED, FORMER_TIER_NAMES, LEARNING_RATES, PAPER, QUICK, TIER_SCALE,
                      TIERS, TINY, Found, Record, Sweep, arm_name, learning_rates, swept, tuned)


def discover(package: str = __name__) -> dict[str, Record]:
    """Every ``Record`` at the top level of the modules of ``package`` (a package name; its
    modules whose names start with "_" are not read), name -> record, sorted by the records'
    ``position``. Raises ValueError for a record without a position, and for two records of one
    name or of one position (the order would not be determined)."""
    pkg = importlib.import_module(package)
    found: dict[int, tuple[Record, str]] = {}
    for info in pkgutil.iter_modules(pkg.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package}.{info.name}")
        for value in vars(module).values():
            if isinstance(value, Record):
                found.setdefault(id(value), (value, module.__name__))
    by_name: dict[str, str] = {}
    by_position: dict[int, str] = {}
    for record, where in found.values():
        if record.position is None:
            raise ValueError(f"record {record.name!r} in {where} has no position; expected "
                             f"Record(..., position=N), an int that places it among the "
                             f"records (taken: {sorted(by_position) or 'none yet'}).")
        for seen, key, what in ((by_name, record.name, "name"),
                                (by_position, record.position, "position")):
            if key in seen:
                raise ValueError(f"records {seen[key]} and {record.name!r} in {where} have the "
                                 f"same {what} {key!r}; expected each record's {what} to be "
                                 f"its own. Change one of them.")
            seen[key] = f"{record.name!r} in {where}"
    return {r.name: r for r, _ in sorted(found.values(), key=lambda rw: rw[0].position)}


# In the order of the report: its claims, its sections and its "not run" list follow this.
RECORDS: dict[str, Record] = discover()


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
           "discover", "learning_rates", "not_downloaded", "register_all", "run_order", "swept",
           "tuned", "with_tier"]

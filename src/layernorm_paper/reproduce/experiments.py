"""The reproduction's experiments, registered with the runner from their records
(``layernorm_paper.records``: each experiment's module holds its configs per preset, its tier,
budget and claims side by side). Presets: ``tiny`` (seconds, tests only), ``quick`` (embedded
data, minutes on 2 CPU cores, 5 seeds), ``full`` (the paper's scale where the data can be
downloaded).

The models they train register in ``models`` (MLP, ConvNet, RNN classifier), ``paper`` (the
section 6 models) and ``order`` (order embeddings), plugin modules of the runner as this one.
"""
from __future__ import annotations

from .. import records
from ..records import cnn_batch_size as _cnn
from ..records import rnn_norms as _rnn
from ..records._record import SEEDS, split as _split  # noqa: F401  (kept importable here)
from . import models  # noqa: F401  (registers repro_mlp, convnet and rnn_classifier)

records.register_all()     # every experiment of the reproduction, the section 6 ones included

FF_SEEDS = SEEDS
CNN128_SEEDS = _cnn.SEEDS_128
BUDGETS = records.budgets()      # experiment -> its budget rule ({"rule", "text"})
rnn_tasks = _rnn.rnn_tasks
# Each experiment's configs, by its name (as when they were defined here).
(mlp_batch_size, cnn_batch_size, rnn_norms, rnn_stability, lstm_gain_init, rnn_downloads) = (
    records.RECORDS[n].configs for n in ("mlp_batch_size", "cnn_batch_size", "rnn_norms",
                                         "rnn_stability", "lstm_gain_init", "rnn_downloads"))

"""Reusable models of the paper's section 6 experiments, in reduced form (docs/reproduce.md).

    from layernorm_paper.models import DRAW, HandwritingMDN, AttentiveReader

    DRAW            6.4: variational auto-encoder with encoder / decoder LSTMs, LN on the cell
                    only; ``forward(x)`` returns the negative ELBO (nats) of each image
    HandwritingMDN  6.5: stacked LSTM with a mixture-density output over pen offsets and an
                    end-of-stroke bit; ``forward(x)`` returns the NLL (nats) of each sequence
    AttentiveReader 6.2: bidirectional LSTM reader with attention over the passage; returns
                    logits over the entities of the passage
    OrderEmbedding  6.1: order embeddings of captions (GRU / LN-GRU) and images (models.order)
    mlp_layers      6.6: the layers of the reproduction's one MLP (models.mlp)

Each recurrent model takes ``norm="none" | "layer"`` (and ``"batch"`` for the reader) for its
recurrent parts; ``mlp_layers`` takes any norm name.

Every model of the reproduction lives in this package (the runner's own example builder,
``mlp``, with its example experiment in ``layernorm_paper.experiments.builtin``). The modules below
register the runner's builders (``layernorm_paper.experiments.register_model``); importing
``layernorm_paper.reproduce`` imports them:

    classifiers   repro_mlp, convnet, rnn_classifier: 6.6's MLP, 6.7's ConvNet and summary B's
                  LSTM classifiers, each adding fair scores to every metrics row (``Scored``)
    paper         draw, reader, mdn, char_lm, order: the section 6 models as the runner trains
                  them (and summary B's character-level LM, ``CharLM``)
    novels_lm     novels_lm      the char-LM on the novels, with their completion test
"""
from .draw import DRAW, CellNormLSTMCell
from .mdn import HandwritingMDN
from .reader import AttentiveReader
from .order import OrderEmbedding
from .mlp import mlp_layers

__all__ = ["DRAW", "CellNormLSTMCell", "HandwritingMDN", "AttentiveReader", "OrderEmbedding",
           "mlp_layers"]

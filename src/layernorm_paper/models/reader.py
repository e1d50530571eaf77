"""The attentive reader (Hermann et al. 2015) with LSTM / BN-LSTM / LN-LSTM (paper section 6.2).

A bidirectional ``layernorm.LSTM`` reads the passage (``y_t``, (N, T, 2H)) and another the query
(``u`` = last forward and first backward state, (N, 2H)); attention over the passage

    m_t = tanh(W_ym y_t + W_um u),   s = softmax_t(w_ms . m_t),   r = sum_t s_t y_t
    g   = tanh(W_rg r + W_ug u)

and the answer logits are ``W_g g`` over the entity vocabulary, restricted to the entities that
occur in the passage (the candidates; others get -inf).

Reduced form (how it differs from the paper's 240-unit reader on the CNN corpus, Adam 8e-5,
batch 64, clip 10): a generated cloze task (``layernorm_paper.data`` "cloze") with a small vocabulary
and short passages, fewer units, one-layer encoders, no dropout, a larger learning rate.
"""
from __future__ import annotations

import torch
from torch import nn

from layernorm.rnn import LSTM


class AttentiveReader(nn.Module):
    """``forward(x) -> logits (N, num_entities)``; x (N, passage_len + query_len) int64 token
    ids: the passage, then the query. Token ids ``0 .. num_entities-1`` are the (anonymised)
    entities. norm: "none" | "batch" | "layer"; gain_init: the normalization gains' initial value
    (None: 1.0 for LN, 0.1 for BN; the paper compared LN gains 1.0 and 0.1)."""

    def __init__(self, vocab_size: int, num_entities: int, passage_len: int, hidden: int = 64,
                 embed: int = 32, norm: str = "layer", gain_init: float | None = None) -> None:
        super().__init__()
        if not 0 < num_entities <= vocab_size:
            raise ValueError(f"AttentiveReader needs 0 < num_entities <= vocab_size, received "
                             f"num_entities={num_entities}, vocab_size={vocab_size}.")
        self.num_entities, self.passage_len, self.norm = num_entities, passage_len, norm
        self.embed = nn.Embedding(vocab_size, embed)
        kw = dict(batch_first=True, bidirectional=True, norm=norm, gain_init=gain_init)
        self.passage_rnn = LSTM(embed, hidden, max_length=passage_len, **kw)
        self.query_rnn = LSTM(embed, hidden, max_length=passage_len, **kw)
        self.w_ym = nn.Linear(2 * hidden, 2 * hidden, bias=False)
        self.w_um = nn.Linear(2 * hidden, 2 * hidden)
        self.w_ms = nn.Linear(2 * hidden, 1, bias=False)
        self.w_rg = nn.Linear(2 * hidden, 2 * hidden, bias=False)
        self.w_ug = nn.Linear(2 * hidden, 2 * hidden)
        self.out = nn.Linear(2 * hidden, num_entities)

    def attend(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits (N, E), attention weights over the passage (N, T))."""
        if x.dim() != 2 or x.shape[1] <= self.passage_len:
            raise ValueError(f"AttentiveReader expected token ids (N, passage_len + query_len) "
                             f"with passage_len={self.passage_len}, received shape "
                             f"{tuple(x.shape)}.")
        passage, query = x[:, :self.passage_len], x[:, self.passage_len:]
        y, _ = self.passage_rnn(self.embed(passage))                  # (N, T, 2H)
        q, _ = self.query_rnn(self.embed(query))                      # (N, Q, 2H)
        H = q.shape[-1] // 2
        u = torch.cat([q[:, -1, :H], q[:, 0, H:]], dim=-1)            # (N, 2H)
        m = torch.tanh(self.w_ym(y) + self.w_um(u)[:, None])          # (N, T, 2H)
        s = torch.softmax(self.w_ms(m).squeeze(-1), dim=-1)           # (N, T)
        r = (s[..., None] * y).sum(1)                                 # (N, 2H)
        g = torch.tanh(self.w_rg(r) + self.w_ug(u))
        logits = self.out(g)                                          # (N, E)
        ids = torch.arange(self.num_entities, device=x.device)
        candidate = (passage[:, :, None] == ids).any(1)               # (N, E)
        return logits.masked_fill(~candidate, float("-inf")), s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attend(x)[0]

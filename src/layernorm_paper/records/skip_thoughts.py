"""Section 6.3: skip-thoughts — no experiment here, only the reason it is not run."""
from __future__ import annotations

from ._record import Record

RECORD = Record(
    "skip_thoughts", position=40, section="6.3",
    claim="skip-thought vectors with an LN-GRU encoder score higher on the downstream tasks "
          "(BookCorpus)",
    not_run={"skip-thoughts (6.3)": "needs BookCorpus (11k books, not redistributable) and ~1M "
                                    "updates; no embedded stand-in is built"})

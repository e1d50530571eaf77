"""The paper's side of every comparison, as text, gathered from the records
(``layernorm_paper.records``: each experiment's module states it beside its configs and claims):
what each experiment stands in for (the paper's or a summary's settings), the numbers the paper
reports for its section 6 experiments, what runs here instead, the downloaded full forms, and the
experiments of section 6 with no runs at all. No rule reads these: they are printed next to the
measured numbers."""
from __future__ import annotations

from ...records import RECORDS

# What each experiment stands in for, from the paper's section 5 table / the summaries (the
# settings actually run are read from the runs' configs).
PAPER_SETTINGS = {r.name: r.paper for r in RECORDS.values() if r.paper}

# What the paper reports, and what runs here instead, printed together
# ("paper: ...; here: ... (DATA_HERE)").
PAPER_NUMBERS = {k: v for r in RECORDS.values() for k, v in r.paper_numbers.items()}
DATA_HERE = {k: v for r in RECORDS.values() for k, v in r.data_here.items()}

# The downloaded full forms (``layernorm reproduce --full``): experiment -> its dataset, and what
# that data is. Judged apart from the embedded form when their runs exist, else listed under
# "Not run".
FULL_FORMS = {r.name: r.full_form for r in RECORDS.values() if r.full_form}

# Experiments of the paper's section 6 with no runs at all, and why (listed under "Not run";
# the data sets the reproduction's experiments stand in for are the records' ``not_downloaded``).
PAPER_NOT_RUN = {k: v for r in RECORDS.values() for k, v in r.not_run.items()}

"""``layernorm reproduce``: the paper's and the seeds' experiments (``experiments``), the models
they train (``models``), and the command that runs them and builds the report (``command``).

Importing this package (or ``models`` / ``experiments``) never imports ``layernorm.report``:
training code does not depend on the report.
"""

"""Reports from tracked runs: the paper's tables and ad-hoc groups, with learning curves.

``runs`` reads an MLflow store into one row per run, ``table`` groups runs into cells
and summarises them over seeds (``stats``), ``render`` prints or writes the table
(text, Markdown, CSV), ``plots`` draws the curves and ``cli`` is ``rlrun report``.
The paper's reference numbers ship as ``references.yaml``.
"""

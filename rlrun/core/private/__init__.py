"""Other libraries' private names, one module per library (``hydra``, ``torch``), each behind a guard.

Every name here is looked up on first use. On a version where it moved, rlrun takes the public
path the module names, says so once (one line on stderr), and never fails. Each module's
docstring holds the measurement that justifies keeping the private name at all.
"""

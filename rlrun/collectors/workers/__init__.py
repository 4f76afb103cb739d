"""Collector worker processes: what runs inside one (``loop``), and how many this machine can hold
(``limits``)."""

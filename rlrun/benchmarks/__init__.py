"""Benchmarks of rlrun against hand-written references (not tests).

Run ``python -m rlrun.benchmarks [collection] [gae] [update] [--quick]``; see
``rlrun/benchmarks/README.md`` for what each reference is and the last results.

Every figure is a ratio against a reference timed in the same process, with
repetitions interleaved and summarised by their median, so that the numbers
survive a shared, noisy machine.
"""

BENCHMARKS = ("collection", "gae", "update")

"""Benchmarks of rlrun against hand-written references (not tests).

Run ``python -m rlrun.benchmarks [BENCHMARK ...] [--quick]`` (names in ``BENCHMARKS``); see
``rlrun/benchmarks/README.md`` for what each reference is and the last results.

Every figure is a ratio against a reference timed in the same run: in the same
process with repetitions interleaved and summarised by their median (collection,
GAE, update), or back to back in child processes (end to end, against
Stable-Baselines3), so that the numbers survive a shared, noisy machine.
"""

BENCHMARKS = ("collection", "gae", "update", "end_to_end", "cli", "table5", "vmas", "marl_parts",
              "offline_update", "startup")

"""The tables of the generated reference that no signature holds: what each component kind is, every
metric name rlrun logs and every exit code (``rlrun.cli.reference`` writes them as pages;
``tests/docs/test_reference.py`` checks them against the code)."""

from __future__ import annotations

# What each component kind is, and where its node sits in a run's config.
KIND_TEXT = {
    "env": ("env", "The environment: a vector env of `env.num_envs` sub-envs."),
    "model": ("model", "The networks: actor, critic or Q-network, and the policy around them."),
    "collector": ("collector", "The data source of an online run: steps the envs with the policy."),
    "buffer": ("buffer", "Where collected data waits to be learnt from: minibatches, replay, slices."),
    "loss": ("loss", "The algorithm's objective: one `Loss` per algorithm (rlrun/algos/)."),
    "optim": ("optim", "The optimiser step: one optimiser over the loss's parameter groups."),
    "hook": ("hooks.<name>", "Callables at the loop's hook points (see How it fits together)."),
    "logger": ("logger", "Where metrics, params and artifacts go."),
    "exploration": ("exploration", "Action noise for deterministic actors (off-policy algorithms)."),
}

# Every metric name rlrun logs (the step of each is the budget's clock: frames, or updates offline).
# tests/docs/test_reference.py checks that each literal metric name in rlrun/ is listed here.
METRICS = [
    ("frames", "Env frames collected so far (all sub-envs), logged beside every metric."),
    ("updates", "Optimiser steps so far, logged beside every metric."),
    ("train/episode_return", "Mean return of the training episodes that ended in the last batch "
     "(raw env reward, before any clipping or scaling)."),
    ("train/episode_length", "Mean length of those episodes."),
    ("train/episode_return_recent", "In `summary.json`: mean return of the last 100 training episodes."),
    ("train/optim_steps", "Optimiser steps so far (as `updates`)."),
    ("train/grad_norm_<group>", "Gradient norm of a parameter group (actor, critic, ...) at the last "
     "optimiser step, before clipping."),
    ("train/<key>", "Any other scalar the loss returns, averaged over the batch's updates (e.g. SAC's "
     "`alpha`, PPO's `approx_kl`, `clip_fraction`, `entropy`); see the losses below."),
    ("loss/<term>", "Each loss term (`loss_<term>` in the loss's output), averaged over the batch's "
     "updates; see the losses below."),
    ("time/fps", "Frames collected per second of wall time since the previous log."),
    ("time/updates_per_s", "Optimiser steps per second since the previous log."),
    ("time/wall_s", "Wall time of the run so far, in seconds."),
    ("collector/policy_lag", "Worker collectors: the learner's policy version minus the version that "
     "collected the batch (0 with multi_sync)."),
    ("eval/episode_return", "Mean return of the evaluation episodes (deterministic actions, "
     "seed + 1000003)."),
    ("eval/episode_return_std", "Standard deviation of those returns."),
    ("eval/episodes", "Number of evaluation episodes."),
    ("eval/time_total_s", "Wall time spent evaluating so far."),
    ("eval/time", "In `best/eval.json` and the summary: the evaluation's time."),
    ("eval/best_return", "`checkpoint.keep_best=true`: the best evaluation return so far."),
    ("eval/best_frame", "`checkpoint.keep_best=true`: the frame it was reached at."),
    ("eval/video", "W&B only: the latest evaluation video, as media."),
]

# Every exit code of the `rlrun` command. tests/docs/test_reference.py checks the error classes'
# codes against it.
EXIT_CODES = [
    (0, "Finished (also `rlrun list`, `explain`, `eval`, `export`, `report`)."),
    (1, "A sweep with a job that did not complete (SLURM: the final table names it); "
     "`python -m rlrun.launch` on a failed job."),
    (2, "Bad input: one message naming the key and the fix (`ConfigError`, `CheckpointError`), before "
     "anything is built; or a run directory that takes no more bytes (full disk, quota, read-only), "
     "naming the file. Rerun the same command once fixed."),
    (3, "Diverged: a non-finite loss, gradient norm or weight (checked once per batch); "
     "`status: diverged`, the last finite checkpoint kept."),
    (4, "A collector worker (process or Ray actor) died (`WorkerError`): one line naming it; the run "
     "ends `failed` with its last checkpoint, and the same command resumes."),
    (130, "Stopped by Ctrl-C (128 + SIGINT) after the current batch, with a checkpoint; a second "
     "Ctrl-C stops at once without one."),
    (143, "Stopped by SIGTERM (128 + 15), e.g. `scancel`, with a checkpoint. Any signal N: 128 + N."),
]

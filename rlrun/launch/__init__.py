"""Launching at scale: parallel local multiruns, SLURM through submitit, Optuna searches.

The pieces, each usable on its own:

- ``hydra/launcher=local``: jobs in parallel on this machine, one process each
  (``submitit_local`` underneath, at most ``max_parallel`` at once).
- ``hydra/launcher=slurm``: one SLURM array per sweep through submitit; with
  ``hydra.launcher.wait=false`` the command returns once the jobs are queued.
  A job that is preempted, hits its time limit or gets SIGTERM writes a
  checkpoint and is requeued; the requeued job resumes in the same run
  directory and MLflow run.
- ``+sweep=NAME`` / ``+hpo=NAME``: checked-in sweeps and searches from the
  repository's ``sweeps/`` (shipped as ``rlrun.sweeps``).
- ``hydra/sweeper=rlrun_optuna`` (selected by ``+hpo=...``): Optuna search with a
  YAML search space, several seeds per trial and pruning on evaluation returns.

Every launched job leaves ``job.json`` (job id, state, run dir) in its run
directory; ``python -m rlrun.launch status <sweep dir>`` lists them and
``python -m rlrun.launch best <study dir>`` reruns a search's best trial.
"""

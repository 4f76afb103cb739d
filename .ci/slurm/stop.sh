#!/usr/bin/env bash
# .ci/slurm/stop.sh - cancel all jobs, then stop the daemons started by .ci/slurm/start.sh, each by
# the PID in its pid file (checked against the expected process name). Packages, config, state kept.
set -u
[ "$(id -u)" = 0 ] || { echo ".ci/slurm/stop.sh: must run as root" >&2; exit 1; }

# stop PIDFILE:COMM... : SIGTERM all given daemons at once, wait up to 30 s, then SIGKILL
stop() {
  local item pf comm pid t0=$EPOCHREALTIME
  local -a pids=() names=() files=()
  for item in "$@"; do
    pf=${item%%:*}; comm=${item##*:}
    [ -s "$pf" ] || { echo "$comm: not running (no pid file)"; continue; }
    pid=$(cat "$pf")
    if ! kill -0 "$pid" 2>/dev/null || [ "$(cat /proc/"$pid"/comm 2>/dev/null)" != "$comm" ]; then
      echo "$comm: not running (stale pid file)"; rm -f "$pf"; continue
    fi
    kill -TERM "$pid"; pids+=("$pid"); names+=("$comm"); files+=("$pf")
  done
  for i in "${!pids[@]}"; do
    for _ in $(seq 150); do kill -0 "${pids[$i]}" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "${pids[$i]}" 2>/dev/null; then echo "${names[$i]}: SIGKILL"; kill -KILL "${pids[$i]}"; fi
    rm -f "${files[$i]}"
    echo "${names[$i]}: stopped (pid ${pids[$i]}) after $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.1f", b-a}')s"
  done
}

# 1. cancel jobs while the controller is still up, and wait for their steps to end
if scontrol ping >/dev/null 2>&1; then
  jobs=$(squeue -h -o %A 2>/dev/null | tr '\n' ' ')
  if [ -n "${jobs// /}" ]; then
    echo "cancelling jobs: $jobs"
    # shellcheck disable=SC2086
    scancel $jobs
    for _ in $(seq 100); do [ -z "$(squeue -h -o %A 2>/dev/null)" ] && break; sleep 0.2; done
  fi
fi
for _ in $(seq 50); do [ -z "$(ps -C slurmstepd -o pid= 2>/dev/null)" ] && break; sleep 0.2; done
left=$(ps -C slurmstepd -o pid= 2>/dev/null | tr '\n' ' ')
[ -n "${left// /}" ] && echo "warning: slurmstepd still running: $left"

# 2. daemons, in reverse start order (independent ones together)
stop /run/slurmd.pid:slurmd /run/slurmctld.pid:slurmctld
stop /run/slurmdbd.pid:slurmdbd
stop /run/mysqld/mysqld.pid:mariadbd /run/munge/munged.pid:munged
exit 0

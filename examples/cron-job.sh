#!/usr/bin/env bash
# cron-job.sh - a job that must run on one machine of the fleet at a time.
#
# Put the same crontab line on every machine, e.g.
#   */10 * * * *  /usr/local/bin/cron-job.sh
# Whichever machine takes the lock first runs the job; the others skip this
# round quietly (exit 0), because -n gives up at once and -E 0 makes that a
# success. If the machine running the job dies, its lock expires within one
# watchdog lease (30 s), and the next round runs elsewhere.
set -u

export DLOCK_URL=${DLOCK_URL:-redis://127.0.0.1:6379}
# With a password: keep it out of the command line and the crontab.
#   export DLOCK_PASSWORD=...            or   --password-file /etc/dlock.pw

exec dlock -n -E 0 --on-lost term --kill-after 30 report-job -c '
  echo "$(date -Is) $(hostname): running $DLOCK_NAME"
  sleep 5   # the real work goes here
'

#!/usr/bin/env bash
# SIGTERM/SIGHUP/SIGINT sent to dlock reach the command; the lock is released
# after the command exits; hold mode releases on SIGTERM/SIGINT; a signal
# while waiting ends dlock without running the command.
. "$(dirname "$0")/common.bash"

# Background jobs of a non-interactive shell start with SIGINT ignored; a
# SIGINT test needs it back to default (coreutils env >= 9.0).
with_int=()
if env --default-signal=INT true 2>/dev/null; then
  with_int=(env --default-signal=INT)
fi

# The command traps SIG, records it and exits 5.
trapper='trap "echo $1 >\"$0.got\"; kill \$s 2>/dev/null; exit 5" $1
  sleep 30 & s=$!; echo ready >"$0.ready"; wait $s'

for sig in TERM HUP INT; do
  pre=()
  if [ $sig = INT ]; then
    if [ ${#with_int[@]} -eq 0 ]; then
      echo "skip: SIGINT (env --default-signal missing)"
      continue
    fi
    pre=("${with_int[@]}")
  fi
  f=$T/$sig
  run_bg p "${pre[@]+"${pre[@]}"}" "$DLOCK" cli-sig sh -c "$trapper" "$f" $sig
  expect_true "$sig: command started" wait_until 10000 test -s "$f.ready"
  expect_true "$sig: lock held while the command runs" is_held cli-sig
  kill -s $sig "$p"
  wait_exit "$p" 10000
  expect "$sig: dlock exits with the command's status" 5 "$ST"
  expect "$sig: the command received it" $sig "$(cat "$f.got" 2>/dev/null)"
  expect_true "$sig: lock released after the command exited" is_free cli-sig
done

# A command killed by the forwarded signal: 128+15.
run_bg p "$DLOCK" cli-sig sh -c 'echo ready >"$0"; exec sleep 30' "$T/plain"
expect_true "plain command started" wait_until 10000 test -s "$T/plain"
kill -TERM "$p"
wait_exit "$p" 10000
expect "command killed by forwarded SIGTERM gives 143" 143 "$ST"
expect_true "lock released" is_free cli-sig

# Hold mode: SIGTERM and SIGINT release and exit 0.
run_bg p "$DLOCK" cli-hold
expect_true "hold mode holds" wait_until 10000 is_held cli-hold
kill -TERM "$p"
wait_exit "$p" 10000
expect "hold mode exits 0 on SIGTERM" 0 "$ST"
expect_true "hold mode released on SIGTERM" is_free cli-hold
if [ ${#with_int[@]} -gt 0 ]; then
  run_bg p "${with_int[@]}" "$DLOCK" cli-hold
  expect_true "hold mode holds (2)" wait_until 10000 is_held cli-hold
  kill -INT "$p"
  wait_exit "$p" 10000
  expect "hold mode exits 0 on SIGINT" 0 "$ST"
  expect_true "hold mode released on SIGINT" is_free cli-hold
fi

# A signal while waiting for the lock: dlock dies of it, the command never
# runs, the holder keeps the lock.
run_bg holder "$DLOCK" cli-wait
expect_true "holder holds cli-wait" wait_until 10000 is_held cli-wait
run_bg w "$DLOCK" -v cli-wait touch "$T/waiter-ran" 2>"$T/w.err"
expect_true "waiter is waiting" wait_until 10000 grep -q acquiring "$T/w.err"
kill -TERM "$w"
wait_exit "$w" 10000
expect "waiter killed while waiting: 143" 143 "$ST"
expect_true "waiter's command never ran" test ! -e "$T/waiter-ran"
expect_true "holder still holds" is_held cli-wait
# SIGINT ignored by our caller (a script's background job, as here) stays
# ignored: INT then TERM to a waiting dlock ends it by TERM, not INT.
run_bg w "$DLOCK" -v cli-wait true 2>"$T/w2.err"
expect_true "second waiter is waiting" wait_until 10000 grep -q acquiring "$T/w2.err"
kill -INT "$w"
kill -TERM "$w"
wait_exit "$w" 10000
expect "an ignored SIGINT stays ignored (ended by SIGTERM: 143)" 143 "$ST"
kill -TERM "$holder"
wait_exit "$holder" 10000
expect "holder exits 0" 0 "$ST"
expect_true "free at the end" is_free cli-wait

finish

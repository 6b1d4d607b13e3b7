#!/usr/bin/env bash
# --layout spring (Spring Integration's RedisLockRegistry layout): the key a
# Spring registry reads, -n against a holder of either flag form, --status,
# no DLOCK_TOKEN, the kinds the layout refuses, and bad layout flags.
. "$(dirname "$0")/common.bash"

S=(--layout spring --registry reg)

# A holder in hold mode: the key holds its client id, with the lease.
run_bg holder "$DLOCK" "${S[@]}" cli-sp 2>"$T/holder.err"
expect_true "holder holds reg:cli-sp" wait_until 10000 \
  sh -c "[ \"\$($REDIS_CLI exists reg:cli-sp)\" = 1 ]"
id=$($REDIS_CLI get reg:cli-sp)
expect_true "the value is a client id ($id)" test "${#id}" -eq 36
pttl=$($REDIS_CLI pttl reg:cli-sp)
expect_true "it has a lease ($pttl ms)" test "$pttl" -gt 0
expect "nothing else is written" 1 "$($REDIS_CLI dbsize)"

"$DLOCK" -n "${S[@]}" cli-sp true
expect "-n against it exits 1" 1 $?
"$DLOCK" -n -u "$DLOCK_URL/?layout=spring&registry=reg" cli-sp true
expect "-n with the URL's form exits 1" 1 $?
"$DLOCK" -n cli-sp touch "$T/redisson"
expect "Redisson's layout is another lock (exits 0)" 0 $?

"$DLOCK" --status "${S[@]}" cli-sp >"$T/status.out"
expect "--status of a held lock exits 0" 0 $?
expect_grep "--status names the kind" "kind:    spring" "$T/status.out"
expect_grep "--status shows the holder's id" "$id" "$T/status.out"
"$DLOCK" --status --json "${S[@]}" cli-sp >"$T/status.json"
expect_grep "--status --json names the kind" '"kind":"spring"' "$T/status.json"

kill -TERM "$holder"
wait_exit "$holder" 10000
expect "holder exits 0 on SIGTERM" 0 "$ST"
expect "its release deleted the key" 0 "$($REDIS_CLI exists reg:cli-sp)"

DLOCK_TOKEN=inherited "$DLOCK" "${S[@]}" cli-sp \
  sh -c 'echo "${DLOCK_TOKEN-unset}"' >"$T/token.out"
expect "a run exits 0" 0 $?
expect "the command gets no DLOCK_TOKEN" unset "$(cat "$T/token.out")"

for k in -s -F "-N 2"; do
  # shellcheck disable=SC2086
  "$DLOCK" $k "${S[@]}" cli-sp true 2>"$T/kind.err"
  expect "$k is refused (64)" 64 $?
  expect_grep "$k: the reason is given" "spring layout" "$T/kind.err"
done

"$DLOCK" --layout spring cli-sp true 2>"$T/noreg.err"
expect "--layout spring without a registry key exits 64" 64 $?
expect_grep "it asks for the key" "needs the registry key" "$T/noreg.err"
"$DLOCK" --layout flat cli-sp true 2>"$T/bad.err"
expect "an unknown layout exits 64" 64 $?
"$DLOCK" --registry reg cli-sp true 2>"$T/reg.err"
expect "--registry with Redisson's layout exits 64" 64 $?
expect "nothing was left behind" 0 "$($REDIS_CLI --scan --pattern 'reg*' | wc -l)"

finish

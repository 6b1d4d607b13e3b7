#!/usr/bin/env bash
# DLOCK_TOKEN: every exclusive run gets a decimal token, strictly greater
# than the previous run's; -v prints the same token; --status shows the last
# one; shared and fair holders get none, and one inherited from an outer
# dlock never leaks in.
. "$(dirname "$0")/common.bash"
require jq "reads --json output"

for i in 1 2 3 4 5; do
  DLOCK_TOKEN=stale "$DLOCK" cli-tok sh -c 'echo "${DLOCK_TOKEN-unset}" >>"$0"' \
    "$T/tok"
  expect "run $i exits 0" 0 $?
done
prev=0
ok=0
while read -r t; do
  if [[ $t =~ ^[0-9]+$ ]] && [ "$t" -gt "$prev" ]; then
    ok=$((ok + 1))
    prev=$t
  else
    fail "token '$t' is not a decimal number above $prev"
  fi
done <"$T/tok"
expect "five decimal tokens, strictly increasing ($(tr '\n' ' ' <"$T/tok"))" 5 "$ok"

"$DLOCK" -v cli-tok sh -c 'echo "$DLOCK_TOKEN"' >"$T/v.out" 2>"$T/v.err"
expect "-v run exits 0" 0 $?
t=$(cat "$T/v.out")
expect_true "-v token is above the previous ones ($t > $prev)" test "$t" -gt "$prev"
expect_grep "-v prints the child's token" "fencing token $t (DLOCK_TOKEN)" "$T/v.err"

"$DLOCK" --status cli-tok >"$T/st.out"
expect "--status of the free lock exits 1" 1 $?
expect_grep "--status shows the last token" "token:   $t " "$T/st.out"
"$DLOCK" --status --json cli-tok >"$T/st.json"
expect_true "--status --json is valid JSON" json_valid "$T/st.json"
expect "json: token" "$t" "$(json_get "$T/st.json" .token)"

DLOCK_TOKEN=stale "$DLOCK" -s cli-tok sh -c 'echo "${DLOCK_TOKEN-unset}"' >"$T/s.out"
expect "shared holder: no DLOCK_TOKEN" unset "$(cat "$T/s.out")"
DLOCK_TOKEN=stale "$DLOCK" -F cli-tokf sh -c 'echo "${DLOCK_TOKEN-unset}"' >"$T/f.out"
expect "fair holder: no DLOCK_TOKEN" unset "$(cat "$T/f.out")"

finish

#!/usr/bin/env bash
# completion.sh - the bash completion of dlock completes what a user types:
# options (every one of --help), the URL schemes after -u, the --on-lost
# actions, the command after NAME. No server; bash's own complete and
# compgen suffice. Run once with plain bash, and once more with
# bash-completion loaded when it is installed (its _command_offset then
# completes the command's arguments).
#   bash completion.sh PATH/TO/dlock PATH/TO/dlock.bash-completion
# shellcheck source=common.bash
. "$(dirname "$0")/common.bash"
SCRIPT=${1:?usage: completion.sh PATH/TO/dlock PATH/TO/dlock.bash-completion}

"$DLOCK" --help >"$T/help"
grep -oE '^  (-[A-Za-z], |    )--[a-z][a-z-]*' "$T/help" |
  sed -E 's/^ +//; s/, / /' | tr ' ' '\n' | sed '/^$/d' | sort -u >"$T/opts"

# complete LINE: COMPREPLY for the cursor at the end of LINE, one per line,
# sorted, in $T/reply. Words are split as bash splits them (at spaces, and
# at ':' and '=', which COMP_WORDBREAKS holds), so the function sees what it
# sees in a terminal.
complete_line() {
  local line=$1
  COMP_LINE=$line
  COMP_POINT=${#line}
  COMP_WORDS=()
  local w rest=$line
  while [ -n "$rest" ]; do
    rest=${rest#"${rest%%[! ]*}"} # leading spaces
    [ -z "$rest" ] && break
    case $rest in
    :* | =*)
      w=${rest:0:1}
      ;;
    *)
      w=${rest%%[ :=]*}
      ;;
    esac
    COMP_WORDS+=("$w")
    rest=${rest:${#w}}
  done
  [ "${line: -1}" = " " ] && COMP_WORDS+=("")
  [[ "${line: -1}" == [:=] ]] && COMP_WORDS+=("")
  COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
  COMPREPLY=()
  _dlock dlock "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
  printf '%s\n' "${COMPREPLY[@]}" | sed '/^$/d' | sort -u >"$T/reply"
}

# has LINE WORD...: every WORD is offered for LINE
has() {
  local line=$1 w missing=
  shift
  complete_line "$line"
  for w in "$@"; do
    grep -qxF -- "$w" "$T/reply" || missing+=" $w"
  done
  expect "'$line<TAB>' offers $*" "" "$missing"
}
# hasnt LINE WORD: WORD is not offered
hasnt() {
  complete_line "$1"
  expect_true "'$1<TAB>' does not offer $2" sh -c "! grep -qxF -- '$2' '$T/reply'"
}
# nothing LINE: nothing is offered
nothing() {
  complete_line "$1"
  expect "'$1<TAB>' offers nothing" 0 "$(wc -l <"$T/reply")"
}

run_checks() {
  local mode=$1
  echo "--- $mode"
  complete -p dlock >"$T/spec" 2>&1
  expect_grep "complete -p dlock names _dlock ($mode)" "-F _dlock" "$T/spec"

  # every option of --help, and no other
  complete_line "dlock -"
  expect "'dlock -<TAB>' offers exactly --help's options ($mode)" \
    "" "$(diff "$T/opts" "$T/reply" | grep '^[<>]' | tr '\n' ' ')"
  has "dlock --on-l" --on-lost
  has "dlock -n --st" --status
  has "dlock -u " redis:// rediss:// unix:/// redis-sentinel:// \
    redis-cluster:// zookeeper:// zk:// etcd:// etcds://
  has "dlock -u zo" zookeeper://
  has "dlock --url=et" etcd:// etcds://
  has "dlock -nu re" redis:// rediss:// redis-sentinel:// redis-cluster://
  has "dlock --on-lost " term kill ignore
  has "dlock --on-lost=k" kill
  nothing "dlock -w "
  nothing "dlock -N 3 "
  # the command after NAME, also after a URL bash splits at ':'
  has "dlock -u redis://127.0.0.1:6379 -w 5 deploy ech" echo
  has "dlock deploy -c ech" echo
  has "dlock -M a b -- ech" echo
  nothing "dlock -M a b"
  hasnt "dlock deploy --st" --status
  hasnt "dlock -- -n --st" --status
  # the command's arguments: file names at least
  : >"$T/some-file"
  has "dlock deploy cat $T/some-f" "$T/some-file"
}

# shellcheck disable=SC1090
. "$SCRIPT"
run_checks "plain bash"

for bc in /usr/share/bash-completion/bash_completion; do
  if [ -r "$bc" ]; then
    # shellcheck disable=SC1090
    . "$bc" >/dev/null 2>&1
    . "$SCRIPT"
    run_checks "with bash-completion"
  else
    echo "skipped: bash-completion is not installed (plain bash only)"
  fi
done

finish

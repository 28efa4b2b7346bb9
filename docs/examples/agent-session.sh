#!/usr/bin/env bash
# The worked example of docs/agents.md, run by tests/sandbox.rs.
#
# Usage: agent-session.sh PROJECT
# Needs `opfs` on $PATH, bubblewrap and FUSE. $AGENT (default: the fake agent
# next to this script) stands in for a coding agent.
set -euo pipefail
project=$(cd "$1" && pwd -P)
here=$(cd "$(dirname "$0")" && pwd -P)
agent=${AGENT:-$here/fake-agent.sh}

check() { # check DESCRIPTION TEST...
  local what=$1; shift
  if "$@"; then echo "ok: $what"; else echo "FAILED: $what" >&2; exit 1; fi
}
turn_of() { # the number of the turn labelled $1
  opfs -C "$project" rewind --all | awk -v l="$1" 'index($0, l) { print $1; exit }'
}

# The user's project before the agent starts.
echo "# demo" > "$project/README.md"

# Part 1: sandboxed agent, one `opfs run --turn` per user message.
for msg in "create a hello module" "rename hello to greet" "delete the README"; do
  opfs -C "$project" run --turn "$msg" -- "$agent" "$msg"
done
opfs -C "$project" rewind                     # the rewind points
check "the agent's work landed" test -x "$project/src/greet.sh" -a ! -e "$project/README.md"

# The user did not want the rename and what came after: rewind, from outside,
# to the start of the turn of that message.
opfs -C "$project" rewind "$(turn_of "rename hello to greet")"
check "hello.sh is back" test -x "$project/src/hello.sh"
check "greet.sh is gone" test ! -e "$project/src/greet.sh"
check "README is back" grep -q demo "$project/README.md"

# Part 2: an agent that runs its own hook per user message, working in a
# mountpoint (opfs's sandbox hides the daemon, so hooks that open turns run
# outside it).
mp=$(mktemp -d "${TMPDIR:-/tmp}/opfs-mp.XXXXXX")
opfs mount "$project" "$mp"
trap 'opfs umount "$mp"; rmdir "$mp"' EXIT
(cd "$mp" && AGENT_HOOK="$here/turn-hook.sh" OPFS_PROJECT="$mp" "$agent" "add a changelog")
check "the hook opened a turn" test -n "$(turn_of "add a changelog")"
opfs -C "$mp" rewind "$(turn_of "add a changelog")"
check "the changelog is undone" test ! -e "$project/CHANGELOG.md"
echo "example passed"

#!/usr/bin/env bash
# The tree-of-thoughts pattern with worktrees (docs/worktrees.md): from one
# turn, two worktrees try two fixes of a failing test, the test runs in
# each, the passing one is merged into the project and the other is
# discarded. Usage: worktrees.sh SCRATCH_DIR (opfs on PATH; OPFS_HOME is
# respected). Prints "example passed" at the end.
set -euo pipefail
scratch=$1
project=$scratch/app
mnt=$scratch/app-mnt
mkdir -p "$project" "$mnt"

# A small project whose test fails: add() subtracts.
cat > "$project/calc.sh" <<'SH'
add() { echo $(( $1 - $2 )); }
SH
cat > "$project/test.sh" <<'SH'
. ./calc.sh
[ "$(add 2 3)" = 5 ] || { echo "FAIL: add 2 3 = $(add 2 3)"; exit 1; }
echo PASS
SH

opfs mount "$project" "$mnt"
trap 'opfs umount "$mnt" 2>/dev/null || true' EXIT
base=$(opfs -C "$mnt" turn --label "the test fails")
(cd "$mnt" && ! bash test.sh)

# Two attempts from the same turn, side by side.
a=$(opfs -C "$mnt" worktree create try-a --from "$base")
b=$(opfs -C "$mnt" worktree create try-b --from "$base")
sed -i 's/\$1 - \$2/$2 - $1/' "$a/calc.sh"     # wrong idea: swap the operands
sed -i 's/\$1 - \$2/$1 + $2/' "$b/calc.sh"     # right idea: add
(cd "$a" && bash test.sh) && ok_a=yes || ok_a=no
(cd "$b" && bash test.sh) && ok_b=yes || ok_b=no
echo "try-a passes: $ok_a, try-b passes: $ok_b"
[ "$ok_a" = no ] && [ "$ok_b" = yes ]

# The project is untouched until the merge.
(cd "$mnt" && ! bash test.sh)
opfs -C "$mnt" worktree diff try-b --stat
merge_turn=$(opfs -C "$mnt" --json worktree merge try-b |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["turn"])')
opfs -C "$mnt" worktree discard try-a
opfs -C "$mnt" worktree discard try-b
(cd "$mnt" && bash test.sh)

# The merge is one turn: rewinding to its start brings the failing test back.
opfs -C "$mnt" rewind "$merge_turn" > /dev/null
(cd "$mnt" && ! bash test.sh)
echo "example passed"

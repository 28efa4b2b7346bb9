#!/bin/sh
# A "user prompt submitted" hook (e.g. Claude Code's UserPromptSubmit): reads
# the hook event as JSON on stdin and opens an opfs turn labelled with the
# prompt. The project (or its mountpoint) is $OPFS_PROJECT, else the current
# directory. The label is cut at the first double quote and 200 bytes.
#
# When no turn can be opened (opfs not on $PATH, no daemon serving the
# project, a stale mount), the user must see it, not only the hook's stderr:
# the hook prints the reason on stderr, on the terminal (/dev/tty, if there
# is one) and as {"systemMessage": "..."} on stdout, which agents with JSON
# hook output (Claude Code, Gemini CLI) show to the user. It exits 0 so the
# agent goes on, unprotected; with OPFS_HOOK_STRICT=1 it exits 2, which
# such agents take as "block this prompt" (and show stderr).
event=$(cat)
prompt=$(printf '%s' "$event" | sed -n 's/.*"prompt" *: *"\([^"]*\)".*/\1/p' | head -c 200)
dir=${OPFS_PROJECT:-$PWD}
if ! command -v opfs >/dev/null 2>&1; then
  why="opfs is not on the hook's PATH ($PATH): install it (see opfs's README) or set PATH for the agent's hooks"
elif why=$(opfs -C "$dir" turn --label "${prompt:-user message}" 2>&1 >/dev/null); then
  exit 0
fi
msg="opfs: no turn was opened for this message, so its changes are NOT recorded and cannot be rewound: ${why#opfs: }"
printf '%s\n' "$msg" >&2
{ printf '%s\n' "$msg" >/dev/tty; } 2>/dev/null
json=$(printf '%s' "$msg" | tr -d '\000-\037' | sed 's/\\/\\\\/g; s/"/\\"/g')
printf '{"systemMessage": "%s"}\n' "$json"
[ "${OPFS_HOOK_STRICT:-0}" = 1 ] && exit 2
exit 0

#!/bin/sh
# A "user prompt submitted" hook (e.g. Claude Code's UserPromptSubmit): reads
# the hook event as JSON on stdin and opens an opfs turn labelled with the
# prompt. The project (or its mountpoint) is $OPFS_PROJECT, else the current
# directory. The label is cut at the first double quote and 200 bytes; a
# hook must not fail the agent, so errors only go to stderr.
event=$(cat)
prompt=$(printf '%s' "$event" | sed -n 's/.*"prompt" *: *"\([^"]*\)".*/\1/p' | head -c 200)
opfs -C "${OPFS_PROJECT:-$PWD}" turn --label "${prompt:-user message}" >/dev/null ||
  echo "turn-hook: could not open an opfs turn" >&2
exit 0

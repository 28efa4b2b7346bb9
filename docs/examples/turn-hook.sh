#!/bin/sh
# A "user prompt submitted" hook (Claude Code's UserPromptSubmit, Codex's
# UserPromptSubmit, Gemini CLI's BeforeAgent) for agents configured by hand:
# `opfs integrate AGENT` writes `opfs hook` itself into the agent's
# configuration, which is the recommended way (docs/integrations.md).
#
# It runs `opfs hook`, which reads the hook event (JSON on stdin), opens an
# opfs turn labelled with the prompt (intact) and the agent's session id as
# its id, in the project $OPFS_PROJECT (or its mountpoint), else the event's
# cwd. All that is left here is the one case `opfs hook` cannot handle: opfs
# not on $PATH. Then, as `opfs hook` does for every other failure, the user
# is told, not only the hook's stderr: the reason goes to stderr, to the
# terminal (/dev/tty, if there is one) and as {"systemMessage": "..."} on
# stdout, which these agents show to the user. It exits 0 so the agent goes
# on, unprotected; with OPFS_HOOK_STRICT=1 it exits 2, which they take as
# "block this prompt" (and show stderr).
if command -v opfs >/dev/null 2>&1; then
  if [ -n "${OPFS_PROJECT:-}" ]; then
    exec opfs -C "$OPFS_PROJECT" hook
  fi
  exec opfs hook
fi
cat >/dev/null
msg="opfs: no turn was opened for this message, so its changes are NOT recorded and cannot be rewound: opfs is not on the hook's PATH ($PATH): install it (see opfs's README) or set PATH for the agent's hooks"
printf '%s\n' "$msg" >&2
{ printf '%s\n' "$msg" >/dev/tty; } 2>/dev/null
json=$(printf '%s' "$msg" | tr -d '\000-\037' | sed 's/\\/\\\\/g; s/"/\\"/g')
[ "${OPFS_HOOK_STRICT:-0}" = 1 ] && exit 2
printf '{"systemMessage": "%s"}\n' "$json"
exit 0

#!/bin/sh
# Stands in for a coding agent in docs/agents.md: takes one user message and
# edits the project in the current directory with ordinary tools (shell
# redirection, mv, rm, sed -i), the kind of changes that edit-tool-only
# checkpoints miss.
#
# If $AGENT_HOOK is set, it is called first with a "user prompt submitted"
# event on stdin, as agents with hook mechanisms do.
set -eu
msg=$1
if [ -n "${AGENT_HOOK:-}" ]; then
  # json.dumps, so a message with quotes or newlines stays valid JSON.
  python3 -c 'import json, sys
print(json.dumps({"hook_event_name": "UserPromptSubmit", "prompt": sys.argv[1]}))' "$msg" |
    "$AGENT_HOOK"
fi
case "$msg" in
  "create a hello module")
    mkdir -p src
    printf 'echo hello\n' > src/hello.sh
    chmod +x src/hello.sh ;;
  "rename hello to greet")
    mv src/hello.sh src/greet.sh
    sed -i 's/hello/greetings/' src/greet.sh ;;
  "delete the README")
    rm README.md ;;
  "add a changelog")
    printf '## 0.1\n- first\n' > CHANGELOG.md ;;
  *)
    echo "fake agent: I do not understand: $msg" >&2
    exit 1 ;;
esac
echo "agent: done: $msg"

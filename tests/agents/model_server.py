#!/usr/bin/env python3
"""A scripted model server for the real-agent tests (tests/agents.rs).

Listens on 127.0.0.1 only (an ephemeral port, written to PORT_FILE once
listening) and answers, from a script, in the dialects the agents speak:

- Anthropic Messages (`POST /v1/messages`, SSE when `"stream": true`),
  used by Claude Code;
- OpenAI Responses (`POST /v1/responses`, SSE), used by Codex CLI;
- OpenAI chat completions (`POST /v1/chat/completions`, SSE or not), used
  by aider;
- Gemini `generateContent` / `streamGenerateContent` (`?alt=sse`), used by
  Gemini CLI.

The script (a JSON file) is a list of entries
`{"match": TEXT, "actions": [ACTION, ...], "reply": TEXT}`. A request
belongs to the first entry whose `match` occurs in its body (the tests put a
unique token in each prompt). Step K of an entry is answered by its K-th
action, K being the number of tool results the request already carries
(for Anthropic Messages: since the prompt being answered, the last user
message with text, so a session of several prompts works too);
past the last action the reply text ends the turn. Actions, translated
into each agent's own tools:

- `{"write": PATH, "content": TEXT}`  create or replace a file
- `{"read": PATH}`                    read a file (Claude Code edits only
                                      files it has read)
- `{"edit": PATH, "old": A, "new": B}` replace A by B in a file
- `{"bash": COMMAND}`                 run a shell command
- `{"tool": NAME, "input": OBJECT}`   Claude Code's tool NAME, as given

A request without tools (titles, summaries) or that matches no entry gets
the text "ok". Every request is appended to LOG_FILE (path and body) for
debugging. Usage: model_server.py SCRIPT PORT_FILE LOG_FILE
"""

import json
import shlex
import sys
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SCRIPT = []
LOG_LOCK = threading.Lock()
LOG_FILE = None


def log(path, body):
    with LOG_LOCK:
        with open(LOG_FILE, "a", encoding="utf-8") as f:
            f.write(json.dumps({"path": path, "body": body}) + "\n")


def entry_for(raw):
    for e in SCRIPT:
        if e["match"] in raw:
            return e
    return None


def shell_of(action):
    """The action as one shell command (for agents whose only tool is a shell)."""
    if "write" in action:
        return "printf %s {} > {}".format(
            shlex.quote(action["content"]), shlex.quote(action["write"])
        )
    if "read" in action:
        return "cat " + shlex.quote(action["read"])
    if "edit" in action:
        py = (
            "import sys;p,a,b=sys.argv[1:4];s=open(p).read();"
            "open(p,'w').write(s.replace(a,b,1))"
        )
        return "python3 -c {} {} {} {}".format(
            shlex.quote(py),
            shlex.quote(action["edit"]),
            shlex.quote(action["old"]),
            shlex.quote(action["new"]),
        )
    return action["bash"]


def tool_names(tools):
    names = set()
    for t in tools or []:
        if isinstance(t, dict):
            if "name" in t:
                names.add(t["name"])
            for fd in t.get("functionDeclarations", []) or []:
                names.add(fd.get("name"))
            if isinstance(t.get("function"), dict):
                names.add(t["function"].get("name"))
    return names


# ---------------------------------------------------------------- Anthropic


def claude_call(action):
    if "tool" in action:
        return action["tool"], action["input"]
    if "write" in action:
        return "Write", {"file_path": action["write"], "content": action["content"]}
    if "read" in action:
        return "Read", {"file_path": action["read"]}
    if "edit" in action:
        return "Edit", {
            "file_path": action["edit"],
            "old_string": action["old"],
            "new_string": action["new"],
        }
    return "Bash", {"command": action["bash"], "description": "run a command"}


def anthropic_prompt_start(body):
    """The index of the last user message that carries text (the prompt
    being answered: a session of several prompts sends the earlier ones
    too), or 0."""
    msgs = body.get("messages", [])
    for i in range(len(msgs) - 1, -1, -1):
        m = msgs[i]
        if m.get("role") != "user":
            continue
        c = m.get("content")
        if isinstance(c, str) or (
            isinstance(c, list)
            and any(isinstance(b, dict) and b.get("type") == "text" for b in c)
            and not any(isinstance(b, dict) and b.get("type") == "tool_result" for b in c)
        ):
            return i
    return 0


def anthropic_steps(body):
    """Tool results since the prompt being answered."""
    n = 0
    for m in body.get("messages", [])[anthropic_prompt_start(body):]:
        c = m.get("content")
        if isinstance(c, list):
            n += sum(1 for b in c if isinstance(b, dict) and b.get("type") == "tool_result")
    return n


def anthropic(handler, body, raw):
    msgs = body.get("messages", [])
    # The entry of the prompt being answered (a session's later request
    # carries the earlier prompts too).
    e = entry_for(json.dumps(msgs[anthropic_prompt_start(body):]) if msgs else raw) if body.get("tools") else None
    blocks = []
    stop = "end_turn"
    if e is None:
        blocks.append({"type": "text", "text": "ok"})
    else:
        k = anthropic_steps(body)
        if k < len(e["actions"]):
            name, inp = claude_call(e["actions"][k])
            blocks.append(
                {"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:20], "name": name, "input": inp}
            )
            stop = "tool_use"
        else:
            blocks.append({"type": "text", "text": e.get("reply", "done")})
    msg_id = "msg_" + uuid.uuid4().hex[:20]
    model = body.get("model", "claude-test")
    usage = {"input_tokens": 10, "output_tokens": 10}
    if not body.get("stream"):
        handler.send_json(
            {
                "id": msg_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": blocks,
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": usage,
            }
        )
        return
    events = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": msg_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 10, "output_tokens": 1},
                },
            },
        )
    ]
    for i, b in enumerate(blocks):
        if b["type"] == "text":
            events.append(
                ("content_block_start", {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}})
            )
            events.append(
                ("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": b["text"]}})
            )
        else:
            events.append(
                (
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": i,
                        "content_block": {"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}},
                    },
                )
            )
            events.append(
                (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": i,
                        "delta": {"type": "input_json_delta", "partial_json": json.dumps(b["input"])},
                    },
                )
            )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(
        (
            "message_delta",
            {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": 10}},
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    handler.send_sse(events)


# ---------------------------------------------------------------- Responses


def responses_steps(body):
    items = body.get("input", [])
    if not isinstance(items, list):
        return 0
    return sum(
        1
        for it in items
        if isinstance(it, dict) and it.get("type") in ("function_call_output", "custom_tool_call_output")
    )


def codex_call(action, names):
    cmd = shell_of(action)
    if "exec_command" in names:
        return "exec_command", {"cmd": cmd}
    if "shell_command" in names:
        return "shell_command", {"command": cmd}
    return "shell", {"command": ["bash", "-lc", cmd]}


def responses(handler, body, raw):
    e = entry_for(raw) if body.get("tools") else None
    resp_id = "resp_" + uuid.uuid4().hex[:20]
    if e is not None and responses_steps(body) < len(e["actions"]):
        name, args = codex_call(e["actions"][responses_steps(body)], tool_names(body.get("tools")))
        item = {
            "type": "function_call",
            "id": "fc_" + uuid.uuid4().hex[:20],
            "call_id": "call_" + uuid.uuid4().hex[:20],
            "name": name,
            "arguments": json.dumps(args),
            "status": "completed",
        }
    else:
        text = e.get("reply", "done") if e else "ok"
        item = {
            "type": "message",
            "id": "msg_" + uuid.uuid4().hex[:20],
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }
    usage = {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 10,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 20,
    }
    base = {"id": resp_id, "object": "response", "model": body.get("model", "gpt-test")}
    events = [
        ("response.created", {"type": "response.created", "response": dict(base, status="in_progress", output=[])}),
        ("response.output_item.added", {"type": "response.output_item.added", "output_index": 0, "item": item}),
        ("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item}),
        (
            "response.completed",
            {"type": "response.completed", "response": dict(base, status="completed", output=[item], usage=usage)},
        ),
    ]
    handler.send_sse(events)


# ---------------------------------------------------------------- chat completions


def chat(handler, body, raw):
    e = entry_for(raw)
    if e is None:
        text = "ok"
    else:
        msgs = body.get("messages", [])
        done = any(
            m.get("role") == "assistant" and isinstance(m.get("content"), str) and e["match"] in m.get("content", "")
            for m in msgs
        )
        text = e.get("reply", "done") if done else e.get("chat", "ok")
    cid = "chatcmpl-" + uuid.uuid4().hex[:20]
    model = body.get("model", "gpt-test")
    if not body.get("stream"):
        handler.send_json(
            {
                "id": cid,
                "object": "chat.completion",
                "created": 0,
                "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
            }
        )
        return
    chunk = lambda delta, fin: {  # noqa: E731
        "id": cid,
        "object": "chat.completion.chunk",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": fin}],
    }
    handler.send_sse(
        [(None, chunk({"role": "assistant", "content": text}, None)), (None, chunk({}, "stop")), (None, "[DONE]")]
    )


# ---------------------------------------------------------------- Gemini


def gemini_call(action):
    if "write" in action:
        return "write_file", {"file_path": action["write"], "content": action["content"]}
    if "read" in action:
        return "read_file", {"file_path": action["read"]}
    if "edit" in action:
        return "replace", {
            "file_path": action["edit"],
            "old_string": action["old"],
            "new_string": action["new"],
            "instruction": "edit",
        }
    return "run_shell_command", {"command": action["bash"], "description": "run a command"}


def gemini_steps(body):
    n = 0
    for c in body.get("contents", []):
        for p in c.get("parts", []) or []:
            if isinstance(p, dict) and "functionResponse" in p:
                n += 1
    return n


def gemini(handler, body, raw, stream):
    e = entry_for(raw) if body.get("tools") else None
    if e is not None and gemini_steps(body) < len(e["actions"]):
        name, args = gemini_call(e["actions"][gemini_steps(body)])
        parts = [{"functionCall": {"name": name, "args": args}}]
    else:
        parts = [{"text": e.get("reply", "done") if e else "ok"}]
    resp = {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 10, "totalTokenCount": 20},
        "modelVersion": "gemini-test",
    }
    if stream:
        handler.send_sse([(None, resp)])
    else:
        handler.send_json(resp)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send_json(self, obj, code=200):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_sse(self, events):
        out = []
        for name, data in events:
            if name:
                out.append("event: " + name)
            out.append("data: " + (data if isinstance(data, str) else json.dumps(data)))
            out.append("")
        data = ("\n".join(out) + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        log(self.path, None)
        if "/models" in self.path:
            self.send_json({"object": "list", "data": [], "models": []})
        else:
            self.send_json({})

    def do_HEAD(self):
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n).decode("utf-8", "replace")
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = {}
        log(self.path, body)
        path = self.path.split("?")[0]
        if path.endswith("/messages/count_tokens"):
            self.send_json({"input_tokens": 10})
        elif path.endswith("/messages"):
            anthropic(self, body, raw)
        elif path.endswith("/responses"):
            responses(self, body, raw)
        elif path.endswith("/chat/completions"):
            chat(self, body, raw)
        elif ":streamGenerateContent" in path:
            gemini(self, body, raw, True)
        elif ":generateContent" in path:
            gemini(self, body, raw, False)
        elif ":countTokens" in path:
            self.send_json({"totalTokens": 10})
        else:
            self.send_json({})


def main():
    global SCRIPT, LOG_FILE
    script, port_file, LOG_FILE = sys.argv[1:4]
    with open(script, encoding="utf-8") as f:
        SCRIPT = json.load(f)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    tmp = port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(server.server_address[1]))
    import os

    os.rename(tmp, port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()

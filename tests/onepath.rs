//! One path (docs/worktrees.md "One path"): the project's own path means
//! the journaled project, or one worktree, for a process tree started by
//! `opfs shell` or `opfs run`; real tools (a Python editable install, a
//! Cargo workspace, `node_modules/.bin`) run in two worktrees at once, each
//! at the project's path, each on its own code and the base's build output;
//! and a process outside any view writing into the project is an edit
//! behind the mount. Real mounts, real bubblewrap; nothing from the network.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;

/// How long one command of these tests may take (a cargo build under load).
const LONG: Duration = Duration::from_secs(300);

fn require_bwrap() {
    assert!(
        which("bwrap").is_some(),
        "these tests need bubblewrap (apt-get install bubblewrap, or scripts/setup)"
    );
}

fn utf8(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// `opfs ARGS...` in the fixture's environment, with `env` added.
fn opfs_env(f: &Fixture, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut c = f.opfs_command(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

fn scratch(f: &Fixture) -> PathBuf {
    f.root().join("scratch")
}

fn finish(f: &Fixture, c: Command) -> Run {
    run_command(c, &scratch(f), LONG).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs both commands at the same time and returns their outcomes.
fn both(f: &Fixture, a: Command, b: Command) -> (Run, Run) {
    let dir = scratch(f);
    let d2 = dir.clone();
    let ta = std::thread::spawn(move || run_command(a, &dir, LONG));
    let tb = std::thread::spawn(move || run_command(b, &d2, LONG));
    let a = ta.join().expect("thread").unwrap_or_else(|e| panic!("{e}"));
    let b = tb.join().expect("thread").unwrap_or_else(|e| panic!("{e}"));
    (a, b)
}

/// A shell prefix that marks `me` ready in `sync` and waits (bounded: 120
/// s) until `other` is ready too, printing BOTH once it is: the two runs
/// prove they overlapped without any timing assumption.
fn barrier(sync: &Path, me: &str, other: &str) -> String {
    let s = utf8(sync);
    format!(
        "touch {s}/{me}; i=0; while [ ! -e {s}/{other} ] && [ $i -lt 1200 ]; do sleep 0.1; \
         i=$((i+1)); done; [ -e {s}/{other} ] && echo BOTH; "
    )
}

/// The real python3 executable (not a version manager's shim, which
/// depends on `$HOME`).
fn python() -> PathBuf {
    let py = which("python3").expect("python3 on PATH");
    let out = Command::new(py)
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("python3");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// A src-layout package whose test fails: `add` subtracts.
fn python_project(f: &Fixture) {
    fs::create_dir_all(f.p("src/pkg")).expect("mkdir");
    fs::create_dir_all(f.p("tests")).expect("mkdir");
    fs::write(
        f.p("src/pkg/__init__.py"),
        "def add(a, b):\n    return a - b\n",
    )
    .expect("write");
    fs::write(
        f.p("tests/test_add.py"),
        "import unittest\nimport pkg\n\nclass T(unittest.TestCase):\n    \
         def test_add(self):\n        print('PKG', pkg.__file__, 'ADD', pkg.add(2, 3), \
         flush=True)\n        self.assertEqual(pkg.add(2, 3), 5)\n",
    )
    .expect("write");
}

/// An editable install of the package at `root` (the path the install
/// names): a venv without pip and a `.pth` file naming `root/src`, which
/// is what `pip install -e .` makes for a src layout, offline.
fn editable_install_script(root: &str) -> String {
    let py = python();
    format!(
        "{} -m venv --without-pip .venv && \
         sp=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])') \
         && echo {root}/src > \"$sp/_pkg.pth\"",
        py.display()
    )
}

fn create_worktree(f: &Fixture, name: &str) -> PathBuf {
    let r = f.opfs_p(&["worktree", "create", name]).ok();
    PathBuf::from(r.stdout.trim())
}

#[test]
fn a_shell_shows_the_project_or_a_worktree_at_its_path_and_nothing_else_changes() {
    require_bwrap();
    let f = Fixture::new();
    fs::write(f.p("a.txt"), "a0\n").expect("write");
    let outside = f.root().join("outside");
    fs::create_dir_all(&outside).expect("mkdir");
    f.mount();
    let t = f.turn("shell work");
    let project = utf8(&f.project).to_string();
    let out = utf8(&outside).to_string();
    // A command: it works at the project's path, through the journal, and
    // writes outside the project as the caller may.
    let r = f
        .opfs_p(&[
            "shell",
            "--",
            "sh",
            "-c",
            &format!(
                "echo shell > {project}/new.txt && echo changed > a.txt && \
                 echo free > {out}/x && echo \"$OPFS_SANDBOX\" \"$PWD\""
            ),
        ])
        .ok();
    assert_eq!(r.stdout, format!("unrestricted {project}\n"), "{r}");
    assert_eq!(fs::read_to_string(outside.join("x")).expect("x"), "free\n");
    // No command: $SHELL, reading the terminal (here stdin).
    let mut c = f.opfs_command(&["-C", &project, "shell"]);
    c.env("SHELL", "/bin/sh");
    let script = f.root().join("stdin.sh");
    fs::write(&script, "echo from-stdin > stdin.txt\n").expect("write");
    c.stdin(fs::File::open(&script).expect("open"));
    let mut child = c.spawn().expect("spawn");
    assert!(child.wait().expect("wait").success());
    assert_eq!(read(&f.p("stdin.txt")), "from-stdin\n");
    // All of it was recorded: a rewind to the turn's start undoes it, and
    // leaves what lies outside the project.
    let v = f.rewind(t);
    check_rewind_result(&v, t, false);
    assert!(!f.p("new.txt").exists() && !f.p("stdin.txt").exists());
    assert_eq!(read(&f.p("a.txt")), "a0\n");
    assert!(outside.join("x").exists());

    // Over a worktree: the same path shows the worktree.
    let w = create_worktree(&f, "w");
    let r = f
        .opfs_p(&[
            "shell",
            "--worktree",
            "w",
            "--",
            "sh",
            "-c",
            &format!("echo wt > {project}/a.txt; cat a.txt; echo \"$OPFS_WORKTREE\""),
        ])
        .ok();
    assert_eq!(r.stdout, "wt\nw\n", "{r}");
    assert_eq!(read(&w.join("a.txt")), "wt\n");
    assert_eq!(read(&f.p("a.txt")), "a0\n", "the project is untouched");

    // With the sandbox's restrictions when asked: outside is read-only.
    let r = f.opfs_p(&[
        "shell",
        "--sandbox",
        "workspace-write",
        "--",
        "sh",
        "-c",
        &format!("echo x > {out}/y"),
    ]);
    assert_ne!(r.code, Some(0), "{r}");
    assert!(!outside.join("y").exists());
    // Flags that mean nothing without restrictions are refused.
    let r = f.opfs_p(&["shell", "--writable", &out, "--", "true"]);
    assert_eq!(r.code, Some(2), "{r}");
    let r = f.opfs_p(&[
        "run",
        "--sandbox",
        "danger-full-access",
        "--worktree",
        "w",
        "--",
        "true",
    ]);
    assert_eq!(r.code, Some(2), "{r}");
    assert!(r.stderr.contains("--sandbox unrestricted"), "{r}");

    // opfs's own commands work inside an unrestricted view, against the
    // daemon of what it shows (the view's namespaces are trusted by it
    // while the shell lives); never from inside a sandbox.
    let bin = opfs_bin();
    let bin = utf8(&bin);
    let r = f
        .opfs_p(&["shell", "--", bin, "turn", "--label", "from inside"])
        .ok();
    let inside: u64 = r.stdout.trim().parse().unwrap_or_else(|_| panic!("{r}"));
    assert!(
        f.points(false)
            .iter()
            .any(|p| p["turn"] == inside && p["label"] == "from inside"),
        "{r}"
    );
    let r = f
        .opfs_p(&[
            "shell",
            "--worktree",
            "w",
            "--",
            bin,
            "-C",
            utf8(&w),
            "turn",
            "--label",
            "in the worktree",
        ])
        .ok();
    assert!(r.stdout.trim().parse::<u64>().is_ok(), "{r}");
    let r = f.opfs_p(&[
        "shell",
        "--sandbox",
        "workspace-write",
        "--",
        bin,
        "-C",
        &project,
        "turn",
    ]);
    assert_ne!(r.code, Some(0), "{r}");
    assert_eq!(f.open_turn(), inside, "no turn opened from the sandbox");
    f.opfs_p(&["worktree", "discard", "w"]).ok();
}

/// A person's shell keeps the terminal: `opfs shell` runs in the
/// terminal's foreground process group (no new session, bwrap not moved to
/// a group of its own), so the shell reads the terminal and has job
/// control. Run under `script`, which gives it a pseudo-terminal: `read`
/// from a background group would stop on SIGTTIN (and the test time out),
/// a new session would show no `+` (foreground) in `ps`'s state.
#[test]
fn a_shell_keeps_the_terminal_and_its_foreground() {
    require_bwrap();
    let script = which("script").expect("script (util-linux) on PATH");
    let f = Fixture::new();
    f.mount();
    let inner = format!(
        "{} -C {} shell -- sh -c 'read x; echo got:$x; ps -o stat= -p $$'",
        opfs_bin().display(),
        f.project.display()
    );
    let input = f.root().join("typed");
    fs::write(&input, "hello\n").expect("write");
    let mut c = Command::new(script);
    f.pinned.pin(&mut c);
    c.args(["-qec", &inner, "/dev/null"]);
    let out = run_with_stdin(c, &input, &scratch(&f));
    assert_eq!(out.code, Some(0), "{out}");
    assert!(out.stdout.contains("got:hello"), "{out}");
    let stat = out
        .stdout
        .lines()
        .last()
        .unwrap_or_default()
        .trim()
        .to_string();
    assert!(
        stat.contains('+'),
        "in the terminal's foreground group: {out}"
    );
}

/// [`run_command`] with stdin read from `input` instead of /dev/null.
fn run_with_stdin(mut c: Command, input: &Path, dir: &Path) -> Run {
    let out = dir.join("stdin-run.out");
    let err = dir.join("stdin-run.err");
    c.stdin(fs::File::open(input).expect("open"))
        .stdout(fs::File::create(&out).expect("create"))
        .stderr(fs::File::create(&err).expect("create"));
    let mut child = c.spawn().expect("spawn");
    let end = std::time::Instant::now() + LONG;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break Some(s);
        }
        if std::time::Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Run {
        what: format!("{c:?}"),
        code: status.and_then(|s| s.code()),
        stdout: fs::read_to_string(&out).unwrap_or_default(),
        stderr: fs::read_to_string(&err).unwrap_or_default(),
    }
}

/// The attrs case, offline: an editable install made once at the
/// project's path, two worktrees with two fixes, the suite run in both at
/// the same time, each importing its own worktree's code at the project's
/// path.
#[test]
fn two_worktrees_run_a_python_suite_at_once_each_on_its_own_code() {
    require_bwrap();
    let f = Fixture::new();
    python_project(&f);
    f.mount();
    let project = utf8(&f.project).to_string();
    f.opfs_p(&[
        "shell",
        "--",
        "sh",
        "-c",
        &editable_install_script(&project),
    ])
    .ok();
    f.turn("the test fails");
    create_worktree(&f, "a");
    create_worktree(&f, "b");
    // Each fix made at the project's path, in its own worktree.
    for (name, body) in [("a", "b - a"), ("b", "a + b")] {
        f.opfs_p(&[
            "shell",
            "--worktree",
            name,
            "--",
            "sh",
            "-c",
            &format!("sed -i 's/a - b/{body}/' src/pkg/__init__.py"),
        ])
        .ok();
    }
    let sync = f.root().join("sync");
    fs::create_dir_all(&sync).expect("mkdir");
    let suite = |me: &str, other: &str| {
        let script = format!(
            "{}.venv/bin/python -m unittest discover -s tests",
            barrier(&sync, me, other)
        );
        opfs_env(
            &f,
            &[
                "-C",
                &project,
                "run",
                "--worktree",
                me,
                "--writable",
                utf8(&sync),
                "--",
                "sh",
                "-c",
                &script,
            ],
            &[],
        )
    };
    let (a, b) = both(&f, suite("a", "b"), suite("b", "a"));
    let module = format!("PKG {project}/src/pkg/__init__.py");
    for (run, add, code) in [(&a, "ADD 1", 1), (&b, "ADD 5", 0)] {
        assert!(run.stdout.contains("BOTH"), "the runs overlapped: {run}");
        assert!(run.stdout.contains(&module), "{run}");
        assert!(run.stdout.contains(add), "its own worktree's code: {run}");
        assert_eq!(run.code, Some(code), "{run}");
    }
    // Nothing reached the project behind its mount (no __pycache__).
    assert!(!f.p("src/pkg/__pycache__").exists());
    assert!(read(&f.p("src/pkg/__init__.py")).contains("a - b"));
    // The passing one is merged as one turn; the project's test passes.
    f.opfs_p(&["worktree", "merge", "b"]).ok();
    assert!(read(&f.p("src/pkg/__init__.py")).contains("a + b"));
    let r = f
        .opfs_p(&[
            "shell",
            "--",
            ".venv/bin/python",
            "-m",
            "unittest",
            "discover",
            "-s",
            "tests",
        ])
        .ok();
    assert!(r.stdout.contains("ADD 5"), "{r}");
    for n in ["a", "b"] {
        f.opfs_p(&["worktree", "discard", n]).ok();
    }
}

/// An editable install made the old way, at the mountpoint, names the
/// mountpoint: inside a run or a shell over a worktree the mountpoint's
/// path shows the worktree too, so it imports the worktree's code (it
/// failed with `ModuleNotFoundError` in the sandbox, and imported the
/// project's code in a worktree's directory).
#[test]
fn an_install_made_at_the_mountpoint_resolves_inside_the_worktree() {
    require_bwrap();
    let f = Fixture::new();
    python_project(&f);
    f.mount();
    let mnt = utf8(&f.mnt).to_string();
    f.sh(&editable_install_script(&mnt));
    f.turn("installed at the mountpoint");
    let w = create_worktree(&f, "fix");
    fs::write(
        w.join("src/pkg/__init__.py"),
        "def add(a, b):\n    return a + b\n",
    )
    .expect("write");
    let probe = "import pkg; print(pkg.__file__, pkg.add(2, 3))";
    let want = format!("{mnt}/src/pkg/__init__.py 5\n");
    for mode in ["workspace-write", "unrestricted"] {
        let r = f
            .opfs_p(&[
                "run",
                "--sandbox",
                mode,
                "--worktree",
                "fix",
                "--",
                ".venv/bin/python",
                "-c",
                probe,
            ])
            .ok();
        assert_eq!(r.stdout, want, "{mode}: {r}");
    }
    // Without a worktree the same install imports the project's code.
    let r = f
        .opfs_p(&["run", "--", ".venv/bin/python", "-c", probe])
        .ok();
    assert_eq!(r.stdout, format!("{mnt}/src/pkg/__init__.py -1\n"), "{r}");
    f.opfs_p(&["worktree", "discard", "fix"]).ok();
}

/// The cargo of the toolchain running the tests (not rustup's proxy,
/// which depends on `$HOME`), and its rustc.
fn cargo_env() -> Vec<(String, String)> {
    let cargo = PathBuf::from(std::env::var("CARGO").expect("CARGO is set by cargo test"));
    let rustc = cargo.with_file_name("rustc");
    assert!(rustc.is_file(), "no rustc next to {}", cargo.display());
    vec![
        ("OPFS_TEST_CARGO".into(), utf8(&cargo).into()),
        ("RUSTC".into(), utf8(&rustc).into()),
    ]
}

/// A workspace of three crates, no dependencies from a registry: `app`
/// uses `liba` and `libb`.
fn cargo_project(f: &Fixture) {
    fs::write(
        f.p("Cargo.toml"),
        "[workspace]\nmembers = [\"liba\", \"libb\", \"app\"]\nresolver = \"2\"\n",
    )
    .expect("write");
    for l in ["liba", "libb"] {
        fs::create_dir_all(f.p(format!("{l}/src"))).expect("mkdir");
        fs::write(
            f.p(format!("{l}/Cargo.toml")),
            format!("[package]\nname = \"{l}\"\nversion = \"0.1.0\"\nedition = \"2021\"\n"),
        )
        .expect("write");
        fs::write(
            f.p(format!("{l}/src/lib.rs")),
            "pub fn v() -> u32 {\n    1\n}\n",
        )
        .expect("write");
    }
    fs::create_dir_all(f.p("app/src")).expect("mkdir");
    fs::write(
        f.p("app/Cargo.toml"),
        "[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
         [dependencies]\nliba = { path = \"../liba\" }\nlibb = { path = \"../libb\" }\n",
    )
    .expect("write");
    fs::write(
        f.p("app/src/main.rs"),
        "fn main() {\n    println!(\"sum {}\", liba::v() + libb::v());\n}\n",
    )
    .expect("write");
}

/// Without what `cargo test` of this crate passes to its tests (a target
/// dir, flags), which would point the inner build elsewhere.
fn no_outer_cargo(mut c: Command) -> Command {
    for k in [
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET_DIR",
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTC_WRAPPER",
        "CARGO_BUILD_RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_MAKEFLAGS",
    ] {
        c.env_remove(k);
    }
    c
}

fn compiled(run: &Run) -> BTreeSet<String> {
    run.stderr
        .lines()
        .chain(run.stdout.lines())
        .filter_map(|l| l.trim().strip_prefix("Compiling "))
        .filter_map(|l| l.split(' ').next().map(String::from))
        .collect()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

/// Two worktrees build at once at the project's path, each reusing the
/// base's `target/` through the lower layer: only the crates its change
/// needs are compiled.
#[test]
fn two_worktrees_build_a_crate_at_once_reusing_the_bases_target() {
    require_bwrap();
    let f = Fixture::new();
    cargo_project(&f);
    f.mount();
    let project = utf8(&f.project).to_string();
    let env = cargo_env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let cargo_home = f.root().join("cargo-home");
    fs::create_dir_all(&cargo_home).expect("mkdir");
    let mut env = env;
    env.push(("CARGO_HOME", utf8(&cargo_home)));
    let build = "\"$OPFS_TEST_CARGO\" build --offline && ./target/debug/app";
    let base = finish(
        &f,
        no_outer_cargo(opfs_env(
            &f,
            &["-C", &project, "shell", "--", "sh", "-c", build],
            &env,
        )),
    );
    assert_eq!(base.code, Some(0), "{base}");
    assert_eq!(compiled(&base), set(&["app", "liba", "libb"]), "{base}");
    f.turn("built");
    create_worktree(&f, "a");
    create_worktree(&f, "b");
    f.opfs_p(&[
        "shell",
        "--worktree",
        "a",
        "--",
        "sh",
        "-c",
        "sed -i 's/1/2/' libb/src/lib.rs",
    ])
    .ok();
    f.opfs_p(&[
        "shell",
        "--worktree",
        "b",
        "--",
        "sh",
        "-c",
        "sed -i 's/sum/total/' app/src/main.rs",
    ])
    .ok();
    let sync = f.root().join("sync");
    fs::create_dir_all(&sync).expect("mkdir");
    let run = |me: &str, other: &str| {
        let script = format!("{}{build}", barrier(&sync, me, other));
        no_outer_cargo(opfs_env(
            &f,
            &[
                "-C",
                &project,
                "run",
                "--worktree",
                me,
                "--writable",
                utf8(&sync),
                "--writable",
                utf8(&cargo_home),
                "--",
                "sh",
                "-c",
                &script,
            ],
            &env,
        ))
    };
    let (a, b) = both(&f, run("a", "b"), run("b", "a"));
    for r in [&a, &b] {
        assert_eq!(r.code, Some(0), "{r}");
        assert!(r.stdout.contains("BOTH"), "the builds overlapped: {r}");
    }
    assert_eq!(compiled(&a), set(&["app", "libb"]), "{a}");
    assert!(a.stdout.contains("sum 3"), "{a}");
    assert_eq!(compiled(&b), set(&["app"]), "{b}");
    assert!(b.stdout.contains("total 2"), "{b}");
    // The project's own build output is untouched.
    let r = Command::new(f.p("target/debug/app")).output().expect("app");
    assert_eq!(String::from_utf8_lossy(&r.stdout), "sum 2\n");
    for n in ["a", "b"] {
        f.opfs_p(&["worktree", "discard", n]).ok();
    }
}

/// `npm test` in a worktree runs the `node_modules/.bin` script npm puts
/// on `$PATH` by the project's absolute path: the worktree's own.
#[test]
fn an_npm_bin_script_runs_from_the_worktree() {
    require_bwrap();
    let npm = which("npm").expect("npm on PATH");
    let f = Fixture::new();
    fs::write(
        f.p("package.json"),
        "{\"name\": \"p\", \"version\": \"1.0.0\", \"scripts\": {\"test\": \"greet\"}}\n",
    )
    .expect("write");
    fs::write(f.p("message.txt"), "base\n").expect("write");
    fs::create_dir_all(f.p("node_modules/greet/bin")).expect("mkdir");
    fs::create_dir_all(f.p("node_modules/.bin")).expect("mkdir");
    fs::write(
        f.p("node_modules/greet/package.json"),
        "{\"name\": \"greet\", \"version\": \"1.0.0\", \"bin\": {\"greet\": \"bin/greet.js\"}}\n",
    )
    .expect("write");
    let js = "#!/usr/bin/env node\nconst fs = require('fs');\n\
              console.log('GREET', 'v1', __filename, \
              fs.readFileSync(process.cwd() + '/message.txt', 'utf8').trim());\n";
    fs::write(f.p("node_modules/greet/bin/greet.js"), js).expect("write");
    f.sh_in(
        &f.project,
        "chmod +x node_modules/greet/bin/greet.js && \
         ln -s ../greet/bin/greet.js node_modules/.bin/greet",
    );
    f.mount();
    f.turn("installed");
    let w = create_worktree(&f, "a");
    fs::write(w.join("message.txt"), "worktree\n").expect("write");
    fs::write(
        w.join("node_modules/greet/bin/greet.js"),
        js.replace("'v1'", "'v2'"),
    )
    .expect("write");
    let project = utf8(&f.project).to_string();
    let env = [
        ("npm_config_update_notifier", "false"),
        ("npm_config_offline", "true"),
        ("npm_config_loglevel", "error"),
    ];
    let r = finish(
        &f,
        opfs_env(
            &f,
            &[
                "-C",
                &project,
                "run",
                "--worktree",
                "a",
                "--",
                utf8(&npm),
                "test",
            ],
            &env,
        ),
    );
    assert_eq!(r.code, Some(0), "{r}");
    let want = format!("GREET v2 {project}/node_modules/greet/bin/greet.js worktree");
    assert!(r.stdout.contains(&want), "{r}");
    // The project, at the same path outside any worktree, runs its own.
    let r = finish(
        &f,
        opfs_env(
            &f,
            &["-C", &project, "shell", "--", utf8(&npm), "test"],
            &env,
        ),
    );
    assert_eq!(r.code, Some(0), "{r}");
    let want = format!("GREET v1 {project}/node_modules/greet/bin/greet.js base");
    assert!(r.stdout.contains(&want), "{r}");
    f.opfs_p(&["worktree", "discard", "a"]).ok();
}

/// While a shell works at the project's path through the mount, a process
/// outside any view (an editor) writes the same path: that is an edit
/// behind the mount. It is never recorded as the turn's, a file the agent
/// overwrites afterwards keeps it (`show --outside`), and a rewind leaves
/// a file the user made.
#[test]
fn a_write_outside_any_view_is_an_edit_behind_the_mount() {
    require_bwrap();
    let f = Fixture::new();
    fs::write(f.p("f"), "v0\n").expect("write");
    f.mount();
    let t = f.turn("agent");
    let sync = f.root().join("sync");
    fs::create_dir_all(&sync).expect("mkdir");
    let s = utf8(&sync);
    let script = format!(
        "echo agent1 > f && touch {s}/agent-wrote && i=0; \
         while [ ! -e {s}/user-wrote ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done; \
         [ -e {s}/user-wrote ] || exit 9; cat mine.txt; echo agent2 > f"
    );
    let project = utf8(&f.project).to_string();
    let shell = opfs_env(
        &f,
        &["-C", &project, "shell", "--", "sh", "-c", &script],
        &[],
    );
    let dir = scratch(&f);
    let agent = std::thread::spawn(move || run_command(shell, &dir, LONG));
    // Outside the shell's namespace the same path is the project itself.
    assert!(
        wait_for(&sync.join("agent-wrote"), Duration::from_secs(120)),
        "the shell never wrote"
    );
    fs::write(f.p("f"), "USER-EDIT\n").expect("write behind the mount");
    fs::write(f.p("mine.txt"), "the user's\n").expect("write behind the mount");
    fs::write(sync.join("user-wrote"), "").expect("write");
    let r = agent
        .join()
        .expect("thread")
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.code, Some(0), "{r}");
    assert_eq!(
        r.stdout, "the user's\n",
        "the view shows the user's file: {r}"
    );
    f.turn("next");
    // The user's edit is kept, not the turn's record.
    let kept = f.opfs_p(&["show", &format!("{t}:f"), "--outside"]).ok();
    assert_eq!(kept.stdout, "USER-EDIT\n", "{kept}");
    assert_eq!(
        f.opfs_p(&["show", &format!("{t}:f")]).ok().stdout,
        "v0\n",
        "the turn's start is the agent's pre-image"
    );
    let log = f.opfs_p(&["log", "--json"]).ok().json();
    let entry = log
        .as_array()
        .and_then(|a| a.iter().find(|e| e["turn"] == t))
        .cloned()
        .unwrap_or_default();
    assert!(
        !entry.to_string().contains("mine.txt"),
        "the user's file is not the turn's: {entry:#}"
    );
    assert_eq!(entry["outside_edits"][0]["path"], "f", "{entry:#}");
    // A rewind puts back the agent's file and never touches the user's.
    let v = f.rewind(t);
    check_rewind_result(&v, t, false);
    assert_eq!(read(&f.p("f")), "v0\n");
    assert_eq!(read(&f.p("mine.txt")), "the user's\n");
}

fn wait_for(p: &Path, limit: Duration) -> bool {
    let end = std::time::Instant::now() + limit;
    while std::time::Instant::now() < end {
        if p.exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    p.exists()
}

fn read(p: &Path) -> String {
    fs::read_to_string(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

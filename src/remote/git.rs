//! The `git` binary as the remote side runs it: a clean environment (only
//! what [`GitEnv`] passes: where git finds the user's credential helpers,
//! SSH agent and proxies), never a prompt, never a hook.

use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long one `git` run that talks to a remote may take when the
/// configuration says nothing (`[push] timeout_seconds`).
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(600);

/// The variables a `git` that talks to a remote is given, taken by the
/// caller from its own environment (the library reads none): `HOME` and
/// `XDG_CONFIG_HOME` (the user's git configuration: credential helpers,
/// `url.*.insteadOf`), `PATH`, `SSH_AUTH_SOCK` and `GIT_SSH_COMMAND`
/// (SSH), the proxy variables. Everything else is left out, and opfs adds
/// `GIT_TERMINAL_PROMPT=0` (no prompt: the pusher has no terminal) and
/// `LC_ALL=C`.
#[derive(Debug, Clone, Default)]
pub struct GitEnv {
    /// Name and value of each variable passed.
    pub vars: Vec<(OsString, OsString)>,
    /// How long one `git` run may take before it is stopped (a remote
    /// that accepts the connection and never answers would otherwise hold
    /// the push lock, and every later push, for good). `None`:
    /// [`DEFAULT_DEADLINE`].
    pub deadline: Option<Duration>,
    /// Stops the `git` runs under way (the daemon's, when it unmounts):
    /// shared by the clones of this environment.
    pub cancel: Cancel,
}

/// A stop for the `git` runs made with one [`GitEnv`] (and its clones),
/// and for the pushes that use it: after [`Cancel::cancel`] every `git`
/// run under way is killed with its process group (git and the transport
/// it started), and every later one, and every push that has not begun,
/// ends at once as interrupted. The daemon cancels its pusher's when it
/// unmounts, so no push of an unmounted project stays behind (until its
/// deadline) holding a connection or the push lock.
#[derive(Debug, Clone, Default)]
pub struct Cancel(Arc<(Mutex<Running>, Condvar)>);

/// What a [`Cancel`] stops.
#[derive(Debug, Default)]
struct Running {
    cancelled: bool,
    /// The process groups (their leaders' pids) of the `git` runs under
    /// way; a pid leaves the list when its process is reaped, under the
    /// same lock, so a group is never signalled after its pid was reused.
    groups: Vec<u32>,
    /// Pushes under way ([`Cancel::begin`]).
    pushes: usize,
}

/// A push under way: [`Cancel::wait_idle`] waits for it to be dropped.
pub(super) struct Busy<'c>(&'c Cancel);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        let mut r = self.0.lock();
        r.pushes -= 1;
        self.0 .0 .1.notify_all();
    }
}

impl Cancel {
    fn lock(&self) -> std::sync::MutexGuard<'_, Running> {
        self.0 .0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stops every `git` run under way (its process group killed) and
    /// every later one.
    pub fn cancel(&self) {
        let mut r = self.lock();
        r.cancelled = true;
        for pid in &r.groups {
            kill_pgid(*pid);
        }
    }

    /// True once [`Cancel::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.lock().cancelled
    }

    /// Marks a push under way until the result is dropped; `None` once
    /// cancelled (the push must not begin).
    pub(super) fn begin(&self) -> Option<Busy<'_>> {
        let mut r = self.lock();
        if r.cancelled {
            return None;
        }
        r.pushes += 1;
        Some(Busy(self))
    }

    /// Waits until no push is under way, at most `limit`; false if one
    /// still is.
    pub fn wait_idle(&self, limit: Duration) -> bool {
        let guard = self.lock();
        let (guard, _) = self
            .0
             .1
            .wait_timeout_while(guard, limit, |r| r.pushes > 0)
            .unwrap_or_else(|e| e.into_inner());
        guard.pushes == 0
    }
}

/// The error of a `git` run stopped by [`Cancel::cancel`].
fn interrupted() -> io::Error {
    io::Error::new(
        io::ErrorKind::Interrupted,
        "git was stopped: the project was unmounted while it ran",
    )
}

impl GitEnv {
    /// The names [`GitEnv`] passes when the caller's environment sets them.
    pub const NAMES: &'static [&'static str] = &[
        "HOME",
        "PATH",
        "XDG_CONFIG_HOME",
        "GIT_CONFIG_GLOBAL",
        "SSH_AUTH_SOCK",
        "GIT_SSH",
        "GIT_SSH_COMMAND",
        "GIT_ASKPASS",
        "SSH_ASKPASS",
        "http_proxy",
        "https_proxy",
        "HTTPS_PROXY",
        "all_proxy",
        "ALL_PROXY",
        "no_proxy",
        "NO_PROXY",
    ];

    /// A `git` command with this environment and nothing else; in
    /// `git_dir` when given. The user's configuration is read (it names
    /// the credential helpers), but hooks, signing and submodule pushes
    /// are turned off, so no setting of theirs runs a program of its own
    /// or changes what is pushed.
    pub fn command(&self, git_dir: Option<&Path>) -> Command {
        let mut cmd = Command::new("git");
        cmd.env_clear()
            .envs(self.vars.iter().map(|(k, v)| (k, v)))
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("LC_ALL", "C")
            .args(["-c", "core.hooksPath=/dev/null"])
            .args(["-c", "push.gpgSign=false"])
            .args(["-c", "push.recurseSubmodules=no"])
            .args(["-c", "push.followTags=false"])
            .args(["-c", "fetch.recurseSubmodules=false"])
            .stdin(Stdio::null());
        if let Some(d) = git_dir {
            cmd.arg("--git-dir").arg(d);
        }
        cmd
    }
}

/// The `receive-pack` a push to a local repository runs (`git push
/// --receive-pack=...`). For a path or a `file://` URL git runs the
/// remote side on this machine, in that repository, with that
/// repository's configuration and without the `-c` settings of the `git
/// push` that started it (git drops them for the other repository), so
/// they are given again here, to the remote side itself: no hook of the
/// repository runs (`pre-receive`, `update`, `post-receive`,
/// `post-update`, `reference-transaction`, `proc-receive`,
/// `push-to-checkout`), no command its configuration names
/// (`core.alternateRefsCommand`, which receive-pack runs to advertise an
/// alternate's refs, becomes `true`, which lists none; `receive.autogc`
/// is off, so no `git maintenance`/`gc` runs there, with its
/// `gc.recentObjectsHook`, `pre-auto-gc`; `receive.denyCurrentBranch` is
/// `refuse`, so a push never updates a work tree there, with its
/// filters; `core.fsmonitor` is off). Over any other transport the remote
/// side is the server's business and this is not given.
///
/// Fetches and `ls-remote` need no such thing: `upload-pack` runs no
/// hook, and its one command setting, `uploadpack.packObjectsHook`, is
/// read only from the user's and the system's configuration, never the
/// repository's.
pub(super) const LOCAL_RECEIVE_PACK: &str = "git -c core.hooksPath=/dev/null \
     -c core.alternateRefsCommand=true -c receive.autogc=false \
     -c receive.denyCurrentBranch=refuse -c core.fsmonitor=false receive-pack";

/// True when git reaches `url` by running its remote side on this machine
/// (git's own rule): a `file://` URL, or a path, that is anything without
/// `://`, with no `:` before its first `/` (`host:path` is SSH) and not
/// `helper::address` (a remote helper).
pub(super) fn is_local(url: &str) -> bool {
    if url.starts_with("file://") {
        return true;
    }
    if url.contains("://") {
        return false;
    }
    let scheme_len = url
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_alphanumeric() || (i > 0 && matches!(c, '+' | '-' | '.'))))
        .map_or(url.len(), |(i, _)| i);
    if scheme_len > 0 && url[scheme_len..].starts_with("::") {
        return false;
    }
    match (url.find(':'), url.find('/')) {
        (None, _) => true,
        (Some(colon), Some(slash)) => slash < colon,
        (Some(_), None) => false,
    }
}

/// The user's `url.<base>.insteadOf` and `url.<base>.pushInsteadOf`
/// rules, as git applies them to a remote URL given on its command line.
#[derive(Debug, Clone, Default)]
pub(super) struct Rewrites {
    /// (base, prefix it replaces, push only)
    rules: Vec<(String, String, bool)>,
}

impl Rewrites {
    /// The rules of the configuration `git` reads with this environment
    /// (the user's and the system's, and `git_dir`'s when given, never the
    /// current directory's repository's). None
    /// when git cannot be run or reports none (a later step says why git
    /// cannot run).
    pub(super) fn read(git: &GitEnv, git_dir: Option<&Path>) -> Rewrites {
        let mut cmd = git.command(git_dir);
        if git_dir.is_none() {
            // Not the repository of the current directory, if any.
            cmd.current_dir("/");
        }
        cmd.args([
            "config",
            "-z",
            "--get-regexp",
            r"^url\..*\.(push)?insteadof$",
        ]);
        let Ok(out) = output(cmd, git) else {
            return Rewrites::default();
        };
        Rewrites::parse(&out.stdout)
    }

    /// The rules of `git config -z --get-regexp` output (`key\nvalue\0`).
    fn parse(out: &[u8]) -> Rewrites {
        let mut rules = Vec::new();
        for rec in out.split(|b| *b == 0).filter(|r| !r.is_empty()) {
            let rec = String::from_utf8_lossy(rec);
            let Some((key, value)) = rec.split_once('\n') else {
                continue;
            };
            let Some(rest) = key.strip_prefix("url.") else {
                continue;
            };
            let (base, push) = match (
                rest.strip_suffix(".pushinsteadof"),
                rest.strip_suffix(".insteadof"),
            ) {
                (Some(b), _) => (b, true),
                (None, Some(b)) => (b, false),
                _ => continue,
            };
            rules.push((base.to_string(), value.to_string(), push));
        }
        Rewrites { rules }
    }

    /// `url` as git rewrites it (git's `alias_url`: the rule with the
    /// longest matching prefix wins) to fetch from it (`push` false: the
    /// `insteadOf` rules) or to push to it (a matching `pushInsteadOf`
    /// rule, else as to fetch), and the rule applied
    /// (`url.<base>.insteadOf = <prefix>`), if any.
    pub(super) fn apply(&self, url: &str, push: bool) -> (String, Option<String>) {
        let best = |want_push: bool| {
            self.rules
                .iter()
                .filter(|(_, prefix, p)| *p == want_push && url.starts_with(prefix.as_str()))
                .fold(None::<&(String, String, bool)>, |best, r| match best {
                    Some(b) if b.1.len() >= r.1.len() => Some(b),
                    _ => Some(r),
                })
        };
        let rule = push.then(|| best(true)).flatten().or_else(|| best(false));
        match rule {
            Some((base, prefix, p)) => (
                format!("{base}{}", &url[prefix.len()..]),
                Some(format!(
                    "url.{base:?}.{} = {prefix:?}",
                    if *p { "pushInsteadOf" } else { "insteadOf" }
                )),
            ),
            None => (url.to_string(), None),
        }
    }

    /// Why git must not be given `url`, if so: a rule of the user's
    /// configuration rewrites it to git's `<transport>::<address>` form,
    /// which runs the remote helper `git-remote-<transport>` found on
    /// `PATH` (`ext::` runs any command), the form opfs refuses in a URL
    /// it is given ([`super::url_problem`]). The message names the rule.
    /// `push` true: the rules git applies to fetch and to push (a push
    /// also reads the remote); false, for a read: the `insteadOf` rules
    /// only, as git ignores `pushInsteadOf` to fetch.
    pub(super) fn problem(&self, url: &str, push: bool) -> Option<String> {
        let uses: &[bool] = if push { &[false, true] } else { &[false] };
        uses.iter().find_map(|&push| {
            let (to, rule) = self.apply(url, push);
            let rule = rule?;
            let (transport, _) = super::names::transport_prefix(&to)?;
            Some(format!(
                "the remote {} is rewritten by your git configuration's {rule} to {}, git's \
                 '{transport}::<address>' form, which runs the remote helper \
                 git-remote-{transport} found on PATH (ext:: runs any command): opfs refuses \
                 that form; change or remove that rule (`git config --global --get-regexp \
                 '^url\\.'` lists them), or give the address itself",
                super::redact_url(url),
                super::redact_url(&to)
            ))
        })
    }
}

/// Runs `cmd` (made by [`GitEnv::command`]), its output captured, for at
/// most `git`'s deadline: past it the run, with every process it started
/// (its own process group), is killed.
///
/// Errors: `git` cannot be started (not on `PATH`: `NotFound`); the
/// deadline passed (`TimedOut`, the message says how long it waited and
/// the fix).
pub(super) fn output(cmd: Command, git: &GitEnv) -> io::Result<Output> {
    output_with_input(cmd, git, None)
}

/// [`output`], with `input` written to git's standard input (by a thread
/// of its own, so a large input and a large output cannot block each
/// other); none: `/dev/null`.
pub(super) fn output_with_input(
    mut cmd: Command,
    git: &GitEnv,
    input: Option<Vec<u8>>,
) -> io::Result<Output> {
    let deadline = git.deadline.unwrap_or(DEFAULT_DEADLINE);
    let mut child = cmd
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()?;
    let pid = child.id();
    {
        let mut r = git.cancel.lock();
        if r.cancelled {
            drop(r);
            kill_group(&mut child);
            return Err(interrupted());
        }
        r.groups.push(pid);
    }
    let forget = |r: &mut Running| r.groups.retain(|p| *p != pid);
    if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
        std::thread::spawn(move || {
            let _ = stdin.write_all(&input);
        });
    }
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let start = Instant::now();
    let status = loop {
        {
            // Reaped under the lock that `cancel` signals under.
            let mut r = git.cancel.lock();
            if r.cancelled {
                forget(&mut r);
                drop(r);
                kill_group(&mut child);
                return Err(interrupted());
            }
            match child.try_wait() {
                Ok(Some(status)) => {
                    forget(&mut r);
                    break status;
                }
                Ok(None) => {}
                Err(e) => {
                    forget(&mut r);
                    drop(r);
                    kill_group(&mut child);
                    return Err(e);
                }
            }
        }
        if start.elapsed() >= deadline {
            forget(&mut git.cancel.lock());
            kill_group(&mut child);
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "git gave no result within {} s and was stopped (a remote that does not \
                     answer, or a transfer slower than that); check the remote, or raise \
                     [push] timeout_seconds",
                    deadline.as_secs()
                ),
            ));
        }
        std::thread::sleep(Duration::from_millis(20).min(deadline));
    };
    Ok(Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    })
}

/// Reads `pipe` to its end on a thread of its own (a full pipe would stall
/// git while the caller waits for it to exit).
fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_end(&mut buf);
        }
        buf
    })
}

/// Kills `child`'s process group (git and the transport it started: `ssh`,
/// `git-remote-http`), then reaps it.
fn kill_group(child: &mut Child) {
    kill_pgid(child.id());
    let _ = child.kill();
    let _ = child.wait();
}

/// Kills the process group led by `pid`.
fn kill_pgid(pid: u32) {
    if let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

/// git's stderr, trimmed, lines joined with "; " (for one-line errors).
pub(super) fn stderr_line(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.contains("Writing objects") && !l.contains("objects:"))
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cancel_stops_the_run_under_way_and_every_later_one() {
        let git = GitEnv::default();
        let running = git.clone();
        let run = std::thread::spawn(move || {
            let mut cmd = Command::new("sh");
            cmd.args(["-c", "sleep 600 & wait"]);
            output(cmd, &running)
        });
        // Once the run is registered, a cancel kills its group.
        let registered = Instant::now();
        while git.cancel.lock().groups.is_empty() {
            assert!(
                registered.elapsed() < Duration::from_secs(60),
                "never started"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let busy = git.cancel.begin();
        assert!(busy.is_some());
        git.cancel.cancel();
        let err = run.join().expect("join").expect_err("stopped");
        assert_eq!(err.kind(), io::ErrorKind::Interrupted);
        assert!(git.cancel.lock().groups.is_empty());
        // No push begins now; the one under way is waited for.
        assert!(git.cancel.begin().is_none());
        assert!(!git.cancel.wait_idle(Duration::from_millis(1)));
        drop(busy);
        assert!(git.cancel.wait_idle(Duration::from_millis(1)));
        let later = output(Command::new("true"), &git).expect_err("stopped");
        assert_eq!(later.kind(), io::ErrorKind::Interrupted);
    }

    #[test]
    fn url_rewrites_are_applied_as_git_does() {
        let r = Rewrites::parse(
            b"url.ssh://h/.insteadof\n/srv/\0url.ssh://h/deep/.insteadof\n/srv/a/\0\
              url.Ext::sh -c x% #.pushinsteadof\n/srv/p\0",
        );
        // The longest prefix wins; the base keeps its case.
        assert_eq!(r.apply("/srv/a/r.git", false).0, "ssh://h/deep/r.git");
        assert_eq!(r.apply("/srv/b.git", false).0, "ssh://h/b.git");
        assert_eq!(r.apply("/other", true), ("/other".to_string(), None));
        // pushInsteadOf only to push, before insteadOf.
        assert_eq!(r.apply("/srv/p.git", false).0, "ssh://h/p.git");
        assert_eq!(r.apply("/srv/p.git", true).0, "Ext::sh -c x% #.git");
        let p = r.problem("/srv/p.git", true).expect("refused");
        assert!(p.contains("pushInsteadOf = \"/srv/p\""), "{p}");
        // A read (git's fetch) ignores pushInsteadOf.
        assert!(r.problem("/srv/p.git", false).is_none());
        assert!(r.problem("/srv/a/r.git", true).is_none());
    }

    #[test]
    fn local_urls_are_those_git_serves_on_this_machine() {
        for local in [
            "/srv/ckpt.git",
            "file:///srv/ckpt.git",
            "ckpt.git",
            "./a:b.git",
            "/a::b",
        ] {
            assert!(is_local(local), "{local}");
        }
        for other in [
            "git://h/r.git",
            "ssh://git@h/r.git",
            "https://h/r.git",
            "git@h:team/r.git",
            "h:r.git",
            "ext::sh -c x",
        ] {
            assert!(!is_local(other), "{other}");
        }
    }
}

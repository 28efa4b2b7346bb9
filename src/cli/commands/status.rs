//! `opfs status`: the mount, the open turn, the store size and the disk
//! use of everything opfs keeps (`disk`: blobs, index, export, worktrees,
//! logs; `state::usage`), and what
//! leaves the project unprotected, said plainly (`docs/cli.md`): no daemon
//! serving it, a stale mount whose daemon is gone, another daemon (another
//! state dir) serving it, a rewind a crash interrupted or one that stopped
//! half way on a failure. `--json` adds
//! `stale_mounts`, `served_elsewhere`, `interrupted_rewind`, `warnings`
//! `record_exclude` (the `[record] exclude` list in effect, set by the
//! last mount; `docs/design.md` "Excluded paths") and `outside_edits`
//! (edits made behind the mount that the mount then overwrote, kept) to
//! the status object.

use std::io::Write;
use std::path::PathBuf;

use opfs::control::Status;
use opfs::record::TurnKind;
use opfs::state::registry;
use opfs::store::{Index, StateDir};

use crate::cli::error::{failure, CommandError};
use crate::cli::output::printable;
use crate::cli::Ctx;

/// The newest turns whose changes to what git runs or trusts `status`
/// names one by one.
const GIT_CHANGE_TURNS: usize = 5;

/// What `status` adds to the daemon's (or the state dir's) status.
#[derive(Debug, Default)]
struct Protection {
    /// opfs mounts of the project whose daemon is gone.
    stale_mounts: Vec<PathBuf>,
    /// Live opfs mounts of the project that this state dir's daemon does
    /// not serve (another `OPFS_HOME`).
    served_elsewhere: Vec<PathBuf>,
    /// An interrupted rewind left in the index: `(rewind turn, to,
    /// started)`, and what a stopped one says of itself.
    interrupted_rewind: Option<(u64, u64, bool)>,
    /// A rewind that stopped on a failure and waits for `--resume`/`--abort`.
    stopped_rewind: Option<opfs::store::index::StoppedRestore>,
    /// One line per problem, for people.
    warnings: Vec<String>,
}

pub fn run(ctx: &Ctx, out: &mut dyn Write, err: &mut dyn Write) -> Result<(), CommandError> {
    let (st, note) = ctx.project_state_or_former()?;
    let project = opfs::control::Project::new(st);
    let status = project.status()?;
    let worktree =
        opfs::worktree::life::describe(ctx.home(), project.state(), &opfs::daemon::worktree::Asked)
            .transpose()?;
    let mut p = protection(project.state(), &status);
    // `.git` is not recorded: a change to what git runs or trusts is only
    // noted (`opfs::capture::git_note`), newest turns first.
    let git_changes = opfs::capture::git_note::git_changes(project.state());
    for (turn, paths) in git_changes.iter().rev().take(GIT_CHANGE_TURNS) {
        p.warnings
            .push(opfs::capture::git_note::git_change_warning(*turn, paths));
    }
    if git_changes.len() > GIT_CHANGE_TURNS {
        p.warnings.push(format!(
            "{} earlier turns changed what git runs or trusts too: `opfs log` shows them",
            git_changes.len() - GIT_CHANGE_TURNS
        ));
    }
    if let Some((_, w)) = &worktree {
        // The upper layer is never mounted as a project: say how to bring
        // the worktree back instead.
        p.warnings
            .retain(|w| !w.starts_with("no opfs daemon serves"));
        if !status.mounted {
            p.warnings.push(format!(
                "worktree {:?} is not mounted: its changes are kept; `opfs worktree mount {}` \
                 (with -C the project) serves it again",
                w.name, w.name
            ));
        }
    }
    let disk = disk_use(project.state());
    let free = opfs::state::usage::free_bytes(&project.state().dir);
    if let Some(w) = refused_warning(&status, free) {
        p.warnings.push(w);
    }
    let exclude = record_exclude(ctx, project.state());
    let kept = outside_edits(project.state());
    let by_top = stored_by_top(project.state(), &exclude.0, worktree.is_some());
    // push.json only caches what the remotes hold: an unreadable one is
    // said, and set aside by the next push.
    let pushes = match opfs::remote::state::load(project.state()) {
        Ok(p) => p,
        Err(e) => {
            p.warnings.push(e.to_string());
            Default::default()
        }
    };
    for aside in opfs::remote::state::set_aside(project.state()) {
        p.warnings.push(format!(
            "{} is an unreadable push state a push set aside (it started afresh); delete it when you have looked",
            aside.display()
        ));
    }
    // The remote the daemon pushes to by itself, if any: a failure on
    // another one (a one-off `opfs push URL`) is retried by nobody.
    let automatic = ctx
        .push_target(&project.state().project, None)
        .ok()
        .flatten()
        .filter(|(_, auto, _)| *auto)
        .map(|(t, _, _)| t.url);
    for (key, r) in &pushes.remotes {
        // An entry written before credentials in URLs were refused: never
        // printed with its secret.
        let redacted = opfs::remote::redact_url(key);
        let url = &printable(&redacted);
        if let Some(f) = &r.failure {
            let retried = if automatic.as_deref() == Some(key.as_str()) {
                String::new()
            } else {
                format!(
                    " (not the remote the daemon pushes to, so nothing tries it again: run `opfs push {}` when it answers, or `opfs push --forget {}` to drop it)",
                    printable(&opfs::paths::shell_quote(&redacted)),
                    printable(&opfs::paths::shell_quote(&redacted)),
                )
            };
            p.warnings.push(format!(
                "pushes to {url} fail ({} attempt(s) since {}){retried}: {}",
                f.attempts,
                ago(f.since_ms),
                printable(&opfs::remote::redact(&f.message, key))
            ));
        }
        for m in &r.missing {
            p.warnings.push(format!(
                "{} at the end of turn {} was pushed to {url} without its bytes (BLAKE3 {}): they were gone from this machine ({}); that version checks out from the remote as its pointer file, the other files and turns are complete",
                m.path, m.turn, m.hash, m.cause
            ));
        }
        for w in &r.withheld {
            p.warnings.push(format!("push to {url}: {}", w.explain()));
        }
    }
    if ctx.format.is_json() {
        let mut v = serde_json::to_value(&status).map_err(failure)?;
        if let Some((project, w)) = &worktree {
            let mut o = serde_json::to_value(w).map_err(failure)?;
            o["project"] = serde_json::json!(project.project);
            v["worktree"] = o;
        }
        v["disk"] = serde_json::to_value(disk).map_err(failure)?;
        v["state_dir_free_bytes"] = serde_json::json!(free);
        v["stale_mounts"] = serde_json::json!(p.stale_mounts);
        v["served_elsewhere"] = serde_json::json!(p.served_elsewhere);
        v["interrupted_rewind"] = match (&p.stopped_rewind, p.interrupted_rewind) {
            (Some(s), _) => serde_json::json!({
                "turn": s.rewind_turn,
                "rewound_to": s.rewound_to,
                "started": true,
                "state": "stopped",
                "restored": s.restored,
                "total": s.total,
                "detail": s.detail,
            }),
            (None, Some((turn, to, started))) => serde_json::json!({
                "turn": turn,
                "rewound_to": to,
                "started": started,
                "state": if started { "running" } else { "not started" },
            }),
            (None, None) => serde_json::Value::Null,
        };
        v["warnings"] = serde_json::json!(p.warnings);
        v["git_changes"] = serde_json::json!(git_changes
            .iter()
            .map(|(turn, paths)| serde_json::json!({"turn": turn, "paths": paths}))
            .collect::<Vec<_>>());
        v["record_exclude"] = serde_json::json!(exclude.0);
        v["record_exclude_next_mount"] = serde_json::json!(exclude.1);
        v["outside_edits"] = kept.iter().map(opfs::history::outside_json).collect();
        v["push"] = pushes
            .remotes
            .iter()
            .map(|(url, r)| {
                let failure = r.failure.clone().map(|mut f| {
                    f.message = opfs::remote::redact(&f.message, url);
                    f
                });
                serde_json::json!({
                    "remote": opfs::remote::redact_url(url),
                    "namespace": r.namespace,
                    "refs": r.pushed.len(),
                    "last_success_ms": r.last_success_ms,
                    "last_turn": r.last_turn,
                    "failure": failure,
                    "missing": r.missing,
                    "withheld": r.withheld,
                })
            })
            .collect();
        v["stored_by_top"] = by_top
            .iter()
            .map(|(u, hint)| {
                serde_json::json!({
                    "top": opfs::paths::display(&u.top),
                    "bytes": u.bytes,
                    "records": u.records,
                    "hint": hint,
                })
            })
            .collect();
        writeln!(out, "{v}")?;
    } else {
        if let Some((project, w)) = &worktree {
            writeln!(
                out,
                "worktree:   {} of {}, from the start of its turn {}; {} path(s) changed against that base{}",
                w.name,
                project.project.display(),
                w.base_turn,
                w.changed,
                if w.drifted > 0 {
                    format!(", {} drifted", w.drifted)
                } else {
                    String::new()
                }
            )?;
        }
        print_human(&status, &p, &disk, free, out)?;
        print_by_top(&by_top, out)?;
        print_outside_edits(&kept, out)?;
        for (url, r) in &pushes.remotes {
            let last = match (r.last_turn, r.last_success_ms) {
                (Some(t), Some(ms)) => format!("turn {t} pushed {}", ago(ms)),
                (None, Some(ms)) => format!("pushed {}", ago(ms)),
                _ => "never pushed".to_string(),
            };
            let failing = r
                .failure
                .as_ref()
                .map(|f| format!("; FAILING ({} attempt(s), see the warning)", f.attempts))
                .unwrap_or_default();
            writeln!(
                out,
                "push:       {} ({}): {last}{failing}",
                printable(&opfs::remote::redact_url(url)),
                r.namespace
            )?;
        }
        if !exclude.0.is_empty() {
            writeln!(
                out,
                "excluded:   {} (not recorded, never restored)",
                exclude.0.join(", ")
            )?;
        }
        if let Some(next) = &exclude.1 {
            writeln!(
                out,
                "note:       the configuration's [record] exclude is [{}]: it takes effect at the next mount",
                next.join(", ")
            )?;
        }
    }
    if let Some(n) = note {
        writeln!(err, "opfs: note: {n}")?;
    }
    Ok(())
}

/// `ms` (since the Unix epoch) as "N s ago" / "N min ago" / "N h ago".
fn ago(ms: u64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let s = now.saturating_sub(ms) / 1000;
    match s {
        0..=119 => format!("{s} s ago"),
        120..=7199 => format!("{} min ago", s / 60),
        _ => format!("{} h ago", s / 3600),
    }
}

/// Edits made behind the mount that the mount then overwrote, kept in the
/// turns the index holds, oldest first (`docs/design.md`, "Edits behind
/// the mount that the agent overwrites"). An unreadable index shows none:
/// `status` reports, it does not fail on it.
fn outside_edits(st: &StateDir) -> Vec<opfs::store::index::OutsideEdit> {
    Index::open_read_only(&st.index_path())
        .and_then(|ix| ix.outside_edits(None))
        .unwrap_or_default()
}

/// The top-level entries `status` lists by stored bytes.
const TOPS_SHOWN: usize = 5;

/// Where the store's bytes go, by the first component of the recorded
/// paths, most first, each with what would save them (`None`: nothing to
/// say): [`TOPS_SHOWN`] of them, those holding bytes. An unreadable index
/// shows none.
fn stored_by_top(
    st: &StateDir,
    excluded: &[String],
    worktree: bool,
) -> Vec<(opfs::store::TopUse, Option<String>)> {
    let tops = Index::open_read_only(&st.index_path())
        .and_then(|ix| ix.bytes_by_top())
        .unwrap_or_default();
    let exclude = opfs::paths::Exclude::new(excluded).unwrap_or_default();
    let project = st.project.display();
    tops.into_iter()
        .filter(|u| u.bytes > 0)
        .take(TOPS_SHOWN)
        .map(|u| {
            let name = opfs::paths::display(&u.top);
            let hint = if exclude.excludes(&u.top) {
                Some(
                    "not recorded since the last mount; these are older records, which retention drops with their turns (`opfs gc` now)"
                        .to_string(),
                )
            } else if worktree {
                None
            } else if let Some(r) = opfs::export::regenerable(&name) {
                Some(format!(
                    "regenerable ({}): ignore it (`/{name}/` in .gitignore) and the next mount leaves it out, or set [projects.\"{project}\".record] exclude = [\"{name}/\"] in the configuration",
                    r.remade_by
                ))
            } else if u.bytes >= 1 << 20 {
                Some(format!(
                    "if it is output a tool makes again, [projects.\"{project}\".record] exclude = [\"{name}/\"] stops recording it from the next mount (a rewind then leaves it alone)"
                ))
            } else {
                None
            };
            (u, hint)
        })
        .collect()
}

/// `stored:` lines, one per top-level entry of [`stored_by_top`].
fn print_by_top(
    tops: &[(opfs::store::TopUse, Option<String>)],
    out: &mut dyn Write,
) -> std::io::Result<()> {
    for (u, hint) in tops {
        write!(
            out,
            "stored:     {} in {} ({} records)",
            opfs::state::usage::format_size(u.bytes),
            opfs::paths::display(&u.top),
            u.records
        )?;
        match hint {
            Some(h) => writeln!(out, ": {h}")?,
            None => writeln!(out)?,
        }
    }
    Ok(())
}

/// At most this many kept edits are listed by `status` (the newest).
const OUTSIDE_SHOWN: usize = 10;

/// `user edit: ...` lines, the newest [`OUTSIDE_SHOWN`] kept edits.
fn print_outside_edits(
    kept: &[opfs::store::index::OutsideEdit],
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let skip = kept.len().saturating_sub(OUTSIDE_SHOWN);
    if skip > 0 {
        writeln!(
            out,
            "user edit:  {skip} older edit(s) made behind the mount and then overwritten are kept (`opfs log` lists them)"
        )?;
    }
    for k in &kept[skip..] {
        writeln!(out, "user edit:  {}", opfs::history::outside_line(k))?;
    }
    Ok(())
}

/// The `[record] exclude` patterns in effect for the state dir, and the
/// configuration's list when it differs (it takes effect at the next
/// mount). An unreadable file or configuration shows as no list: `status`
/// reports, it does not fail on them.
fn record_exclude(ctx: &Ctx, st: &StateDir) -> (Vec<String>, Option<Vec<String>>) {
    let now = st
        .record_exclude()
        .map(|e| e.patterns().to_vec())
        .unwrap_or_default();
    let configured = ctx.record_patterns(&st.project).ok();
    let next = configured.filter(|c| *c != now);
    (now, next)
}

/// The disk use of the state dir, with each worktree's own history (a
/// state dir of its own, keyed by its upper layer) counted as worktrees.
fn disk_use(st: &StateDir) -> opfs::state::usage::Usage {
    let mut disk = opfs::state::usage::of(st);
    if let Some(home) = st.dir.parent().and_then(|p| p.parent()) {
        for (wt, _) in opfs::worktree::list(st) {
            let b = opfs::state::usage::disk_bytes(&wt.state(home).dir);
            disk.worktrees += b;
            disk.total += b;
        }
    }
    disk
}

/// What leaves the project unprotected. Read-only: it changes nothing (an
/// interrupted rewind is finished by the next mount, not here).
fn protection(st: &StateDir, s: &Status) -> Protection {
    let mut p = Protection::default();
    let project = &st.project;
    let mut stale: Vec<PathBuf> = Vec::new();
    // The daemon that answered serves its own mount: only the others are
    // asked whether they live (a busy daemon may keep them waiting).
    for m in opfs::daemon::mounts_of(project) {
        if s.mountpoint.as_ref() == Some(&m) {
            continue;
        }
        if opfs::daemon::is_dead_mount(&m) {
            stale.push(m);
        } else {
            p.served_elsewhere.push(m);
        }
    }
    if !s.mounted {
        // A killed daemon leaves its mountpoint recorded.
        if let Some(m) = registry::recorded_mountpoint(st) {
            if opfs::daemon::is_dead_mount(&m) && !stale.contains(&m) {
                stale.push(m);
            }
        }
    }
    for m in &stale {
        p.warnings.push(format!(
            "stale mount at {m}: its daemon is gone (Transport endpoint is not connected), so \
             nothing there is served or recorded; run `opfs mount {project} {mq}` again (it \
             cleans up the dead mount and finishes an interrupted rewind), or `fusermount3 -uz {mq}`",
            m = m.display(),
            mq = opfs::paths::shell_quote(&m.display().to_string()),
            project = opfs::paths::shell_quote(&project.display().to_string())
        ));
    }
    p.stale_mounts = stale;
    for m in &p.served_elsewhere {
        p.warnings.push(format!(
            "{} is served by another opfs daemon at {}, with another state dir (another \
             OPFS_HOME): this state dir records none of the changes made there",
            project.display(),
            m.display()
        ));
    }
    if !s.mounted && p.served_elsewhere.is_empty() {
        p.warnings.push(format!(
            "no opfs daemon serves {}: changes to it are not recorded; mount it \
             (`opfs mount {} MOUNTPOINT`) and work in the mountpoint",
            project.display(),
            opfs::paths::shell_quote(&project.display().to_string())
        ));
    }
    // Stopped on a failure: nothing finishes it by itself, mounted or not.
    p.stopped_rewind = Index::open_read_only(&st.index_path())
        .ok()
        .and_then(|ix| ix.stopped_restore().ok().flatten());
    if let Some(s) = &p.stopped_rewind {
        p.warnings.push(s.to_string());
    }
    if s.mounted && p.stopped_rewind.is_none() {
        // A restore still running behind the open turn: marking it done
        // failed (the index), though the daemon went on serving.
        p.interrupted_rewind = unfinished_behind_open_turn(st);
        if let Some((turn, to, _)) = p.interrupted_rewind {
            p.warnings.push(format!(
                "the rewind to turn {to} (turn {turn}) could not be marked finished (the index \
                 failed): the project may be half restored; the next `opfs rewind` or `opfs \
                 mount` finishes it, checked like any rewind"
            ));
        }
    }
    if s.mounted && p.interrupted_rewind.is_none() {
        if let Some((turn, to, outcome)) = rewind_turn_left_open(st) {
            p.warnings.push(if outcome.as_deref() == Some("done") {
                format!(
                    "the rewind to turn {to} (turn {turn}) finished but its turn is still open \
                     (the index failed to open the next one): changes made now are recorded in \
                     it; the next `opfs turn`, `opfs rewind` or `opfs mount` opens an agent turn"
                )
            } else {
                format!(
                    "the open turn {turn} is the rewind to turn {to}'s, left open: that rewind \
                     failed before it changed anything and could not close its turn (or is \
                     recording right now); the project is as it was before it. Changes made now \
                     are recorded in that turn; the next `opfs turn`, `opfs rewind` or `opfs \
                     mount` closes it as rolled back, without restoring anything"
                )
            });
        }
    }
    if !s.mounted && p.stopped_rewind.is_none() {
        p.interrupted_rewind = interrupted_rewind(st);
        if let Some((turn, to, started)) = p.interrupted_rewind {
            p.warnings.push(if started {
                format!(
                    "a rewind to turn {to} (turn {turn}) was interrupted: the project may be \
                     half restored; `opfs mount` finishes it before serving (so does the next \
                     `opfs rewind` run while unmounted)"
                )
            } else {
                format!(
                    "a rewind to turn {to} (turn {turn}) was interrupted before it changed \
                     anything; `opfs mount` closes its turn"
                )
            });
        }
    }
    p
}

/// While mounted: a restore still marked running whose rewind turn is
/// closed (one the daemon is running has the open turn), as
/// `(rewind turn, to, true)`.
fn unfinished_behind_open_turn(st: &StateDir) -> Option<(u64, u64, bool)> {
    let ix = Index::open_read_only(&st.index_path()).ok()?;
    let (turn, to) = ix.unfinished_restore().ok()??;
    let open = ix.turns(Some(1)).ok()?.into_iter().next()?;
    (open.number > turn).then_some((turn, to, true))
}

/// While mounted: the open turn is a rewind turn whose restore is not
/// running (none, or ended: a rewind that failed, or finished, and could
/// not open the next turn), as `(turn, to, outcome)`.
fn rewind_turn_left_open(st: &StateDir) -> Option<(u64, u64, Option<String>)> {
    let ix = Index::open_read_only(&st.index_path()).ok()?;
    let open = ix.turns(Some(1)).ok()?.into_iter().next()?;
    if open.kind != TurnKind::Rewind || open.ended_at.is_some() {
        return None;
    }
    let outcome = ix.restore_outcome(open.number).ok()?;
    (outcome.as_deref() != Some("running") && outcome.as_deref() != Some("stopped"))
        .then(|| (open.number, open.rewound_to.unwrap_or(0), outcome))
}

/// A rewind a crash interrupted: a restore still marked running, else a
/// rewind turn left open. A daemon finishes either when it starts, so this
/// is asked only while unmounted. An index that cannot be read has none
/// to report (status itself has read it already).
fn interrupted_rewind(st: &StateDir) -> Option<(u64, u64, bool)> {
    let ix = Index::open_read_only(&st.index_path()).ok()?;
    if let Ok(Some((turn, to))) = ix.unfinished_restore() {
        return Some((turn, to, true));
    }
    let open = ix.turns(Some(1)).ok()?.into_iter().next()?;
    if open.kind == TurnKind::Rewind && open.ended_at.is_none() {
        let outcome = ix.restore_outcome(open.number).ok().flatten();
        // A finished restore whose next turn was not opened yet changed
        // the project completely: nothing is half done. One marked rolled
        // back (it failed before it wrote) is reported like one that never
        // began.
        if outcome.is_none() || outcome.as_deref() == Some("rolled_back") {
            return Some((open.number, open.rewound_to.unwrap_or(0), false));
        }
    }
    None
}

/// The warning for mutations refused because their capture failed (a
/// full state dir, `ENOSPC`; a failing one, `EIO`): since when, how many,
/// the free space left, and the fix.
fn refused_warning(s: &Status, free: Option<u64>) -> Option<String> {
    let r = s.mutations_refused.as_ref()?;
    let since = crate::cli::output::rfc3339(
        i64::try_from(r.since_ms)
            .unwrap_or(i64::MAX / 1_000_000)
            .saturating_mul(1_000_000),
    );
    let free = free.map_or_else(|| "unknown".to_string(), opfs::state::usage::format_size);
    Some(if r.errno == "ENOSPC" {
        format!(
            "mutations are refused since {since}: {} failed because the state dir's filesystem is full ({free} free at {}); the project is unchanged by them. Free space there (`opfs gc` drops old turns), then work goes on",
            count(r.count),
            s.state_dir.display()
        )
    } else {
        format!(
            "mutations are refused since {since}: {} failed with {} (the store in {} fails; see the daemon log); the project is unchanged by them",
            count(r.count),
            r.errno,
            s.state_dir.display()
        )
    })
}

fn count(n: u64) -> String {
    if n == 1 {
        "1 mutation's capture".to_string()
    } else {
        format!("{n} mutations' captures")
    }
}

fn print_human(
    s: &Status,
    p: &Protection,
    disk: &opfs::state::usage::Usage,
    free: Option<u64>,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    use opfs::state::usage::format_size as size;
    writeln!(out, "project:    {}", s.project.display())?;
    match &s.mountpoint {
        Some(m) => writeln!(
            out,
            "mounted:    {} (daemon pid {})",
            m.display(),
            s.pid.unwrap_or(0)
        )?,
        None => writeln!(out, "mounted:    no (nothing is recorded)")?,
    }
    writeln!(out, "open turn:  {}", s.turn)?;
    writeln!(
        out,
        "store:      {} bytes in blobs, {} pre-image records ({})",
        s.store_bytes,
        s.records,
        s.state_dir.display()
    )?;
    writeln!(
        out,
        "disk:       {} in the state dir: blobs {}, index {}, export {}, worktrees {}, logs {}, other {}{}",
        size(disk.total),
        size(disk.blobs),
        size(disk.index),
        size(disk.export),
        size(disk.worktrees),
        size(disk.logs),
        size(disk.other),
        free.map(|f| format!("; {} free on its filesystem", size(f))).unwrap_or_default()
    )?;
    if s.project_deleted {
        writeln!(
            out,
            "warning:    the project directory was deleted while mounted; changes through the mount fail and rewinds are refused (unmount it)"
        )?;
    }
    for w in &p.warnings {
        writeln!(out, "warning:    {w}")?;
    }
    if let Some(r) = &s.recovered {
        writeln!(out, "recovered:  {r}")?;
    }
    Ok(())
}

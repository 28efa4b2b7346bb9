//! The daemon's automatic push: a thread of its own that pushes after
//! each export, off the agent's path, and retries a failed push on a
//! timer until it succeeds.

use std::time::Duration;

use crossbeam_channel::RecvTimeoutError;

use crate::store::StateDir;

use super::{push, GitEnv, PushError, Target};

/// How long the pusher waits before it tries a failed push again, unless
/// configured (`[push] retry_seconds`).
pub const DEFAULT_RETRY: Duration = Duration::from_secs(60);

/// What the daemon's automatic push needs.
#[derive(Debug, Clone)]
pub struct AutoPush {
    /// Where to.
    pub target: Target,
    /// The environment `git` gets ([`GitEnv`]).
    pub git: GitEnv,
    /// The wait before a failed push is tried again.
    pub retry: Duration,
}

/// Starts the automatic pusher of `state`'s project: each wake-up through
/// the returned sender (the background exporter sends one after each
/// export) pushes what is exported ([`push`]); wake-ups during a push
/// merge into one more. After a failure it tries again every
/// [`AutoPush::retry`] until a push succeeds. Failures are logged and
/// recorded in `push.json` (`opfs status` shows them), never returned:
/// a push must not fail or slow a turn.
///
/// The thread ends when every sender is dropped.
pub fn spawn_pusher(state: StateDir, auto: AutoPush) -> crossbeam_channel::Sender<()> {
    let (tx, rx) = crossbeam_channel::bounded::<()>(1);
    let spawned = std::thread::Builder::new()
        .name("opfs-push".into())
        .spawn(move || {
            let mut failing = false;
            loop {
                let woke = if failing {
                    match rx.recv_timeout(auto.retry) {
                        Ok(()) | Err(RecvTimeoutError::Timeout) => true,
                        Err(RecvTimeoutError::Disconnected) => false,
                    }
                } else {
                    rx.recv().is_ok()
                };
                if !woke {
                    break;
                }
                // Unmounted: no push begins, and the one under way (its
                // git killed) ends as interrupted, recorded in push.json.
                let Some(_busy) = auto.git.cancel.begin() else {
                    break;
                };
                match push(&state, &auto.target, &auto.git) {
                    Ok(r) => {
                        failing = false;
                        if let Some(note) = &r.push_state_set_aside {
                            log::warn!("{note}");
                        }
                        for m in &r.objects_missing {
                            log::warn!(
                                "{} at the end of turn {} was pushed without its bytes (BLAKE3 {}): they are gone from this machine ({}); it checks out as its pointer file",
                                m.path, m.turn, m.hash, m.cause
                            );
                        }
                        for w in &r.objects_withheld {
                            log::warn!("{}", w.explain());
                        }
                        if !r.up_to_date() {
                            log::info!(
                                "pushed {} ref(s) ({} deleted, {} adopted as already there, {} bytes; {} object(s), {} bytes to the bucket) to {} in {} ms",
                                r.updated,
                                r.deleted,
                                r.adopted,
                                r.bytes_sent,
                                r.objects_uploaded,
                                r.object_bytes,
                                super::redact_url(&r.remote),
                                r.elapsed_ms
                            );
                        }
                    }
                    Err(e @ PushError::Interrupted { .. }) => {
                        log::info!("{e}");
                        break;
                    }
                    Err(e) => {
                        failing = true;
                        log::warn!(
                            "automatic push failed (tried again in {} s): {}",
                            auto.retry.as_secs(),
                            super::redact(&e.to_string(), &auto.target.url)
                        );
                    }
                }
            }
        });
    if let Err(e) = spawned {
        log::warn!("cannot start the automatic push: {e}");
    }
    tx
}

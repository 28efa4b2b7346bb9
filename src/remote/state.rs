//! What the pushes of a project did last, per remote: the refs each push
//! left on the remote (the leases of the next push) and the last failure.
//! One JSON file in the state dir (`push.json`), replaced whole (written
//! to a temporary file, then renamed), read by `opfs status`.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::store::StateDir;

/// The state of every remote a project was pushed to, keyed by URL.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PushState {
    /// Per remote URL.
    #[serde(default)]
    pub remotes: BTreeMap<String, RemoteState>,
}

/// What the pushes to one remote did.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RemoteState {
    /// The namespace pushed to (`refs/opfs/<machine>/<project key>`).
    pub namespace: String,
    /// Each ref the last successful push left on the remote, and its
    /// commit id: what the next push expects to find there (its leases).
    #[serde(default)]
    pub pushed: BTreeMap<String, String>,
    /// When the last push succeeded, in ms since the Unix epoch.
    pub last_success_ms: Option<u64>,
    /// The newest turn the remote holds (as of the last success).
    pub last_turn: Option<u64>,
    /// The failure of the pushes since the last success, if they failed.
    pub failure: Option<Failure>,
    /// Pointer files pushed without their bytes in the bucket: the bytes
    /// were gone for good when the push ran (in no blob store, nor in the
    /// project). Each checks out as its pointer file. An entry goes once
    /// a push finds its object in the bucket (sends the same content, or
    /// finds it there); `opfs push --objects` makes the list exactly the
    /// versions of the export it still cannot send.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<Missing>,
    /// Pointer files pushed without their bytes because they did not fit
    /// their turn's budget (`[push] bucket_turn_budget`): not sent to the
    /// bucket by this machine. Raising the budget and `opfs push
    /// --objects` sends them (and drops them from this list).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub withheld: Vec<Withheld>,
}

/// An object a turn's budget did not let a push send.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Withheld {
    /// The project-relative path (with `(worktree NAME)` for a worktree's).
    pub path: String,
    /// The turn whose end it is.
    pub turn: u64,
    /// The content's BLAKE3, hex: the bucket key's last part.
    pub hash: String,
    /// The object's size, bytes.
    pub size: u64,
    /// The budget of its turn when it was withheld, bytes.
    pub budget: u64,
}

impl Withheld {
    /// Why it was withheld and the fix, in words (the push's output,
    /// `opfs status`, the daemon log).
    pub fn explain(&self) -> String {
        let what = if self.size > self.budget {
            format!(
                "it is larger than the bucket's per-turn budget of {} bytes",
                self.budget
            )
        } else {
            format!(
                "it did not fit in its turn's bucket budget of {} bytes after the turn's smaller objects",
                self.budget
            )
        };
        format!(
            "{} at the end of turn {} ({} bytes, BLAKE3 {}) was pushed without its bytes: {what}; it checks out from the remote as its pointer file; to send it, raise [push] bucket_turn_budget (bytes, or \"none\") and run `opfs push --objects`",
            self.path, self.turn, self.size, self.hash
        )
    }
}

/// A version whose bytes a push could not upload, for good.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Missing {
    /// The project-relative path (with `(worktree NAME)` for a worktree's).
    pub path: String,
    /// The turn whose end it is.
    pub turn: u64,
    /// The content's BLAKE3, hex: the bucket key's last part.
    pub hash: String,
    /// Why its bytes could not be read.
    pub cause: String,
}

/// Pushes that failed since the last success.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Failure {
    /// `unreachable`, `clash`, `refused`, `bucket`, `interrupted`,
    /// `not_exported` or `error` (see
    /// [`super::PushError::kind`]).
    pub kind: String,
    /// The error of the last attempt, as printed.
    pub message: String,
    /// The first failed attempt, ms since the Unix epoch.
    pub since_ms: u64,
    /// The last attempt, ms since the Unix epoch.
    pub last_attempt_ms: u64,
    /// Attempts that failed in a row.
    pub attempts: u64,
}

/// The push state of `state`'s project; empty when it never pushed.
///
/// Errors: the file exists but cannot be read, or does not parse
/// (`InvalidData`, the message naming the file and saying that it is
/// only a cache: [`load_or_set_aside`] replaces it).
pub fn load(state: &StateDir) -> io::Result<PushState> {
    let path = state.push_state_path();
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} is unreadable ({e}); it only caches what each remote holds (the refs \
                     the last push left there), so nothing is lost without it: the next push \
                     sets it aside as {}-<time> and finds its refs on the remote again",
                    path.display(),
                    CORRUPT_SUFFIX.trim_end_matches('-')
                ),
            )
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(PushState::default()),
        Err(e) => Err(e),
    }
}

/// What follows `push.json` in the name of an unreadable one set aside.
const CORRUPT_SUFFIX: &str = ".corrupt-";

/// [`load`], except that an unreadable `push.json` (one that does not
/// parse) is renamed `push.json.corrupt-<ms since the epoch>` and an empty
/// state returned, with a message saying so: the next push finds on the
/// remote the refs it had pushed (their commits are the export's) and
/// takes them as pushed. The caller holds the push lock.
///
/// Errors: the file cannot be read (other than not existing) or renamed.
pub(super) fn load_or_set_aside(state: &StateDir) -> io::Result<(PushState, Option<String>)> {
    match load(state) {
        Ok(s) => Ok((s, None)),
        Err(e) if e.kind() == io::ErrorKind::InvalidData => {
            let path = state.push_state_path();
            let mut aside = path.as_os_str().to_owned();
            aside.push(format!("{CORRUPT_SUFFIX}{}", now_ms()));
            let aside = std::path::PathBuf::from(aside);
            std::fs::rename(&path, &aside)?;
            Ok((
                PushState::default(),
                Some(format!(
                    "{} was unreadable: set aside as {} (delete it when you have looked); \
                     the push started afresh and found on the remote the refs pushed before",
                    path.display(),
                    aside.display()
                )),
            ))
        }
        Err(e) => Err(e),
    }
}

/// The unreadable `push.json` files [`load_or_set_aside`] set aside,
/// oldest first.
pub fn set_aside(state: &StateDir) -> Vec<std::path::PathBuf> {
    let path = state.push_state_path();
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Vec::new();
    };
    let prefix = format!("{}{CORRUPT_SUFFIX}", name.to_string_lossy());
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

/// Drops the entry of remote `url` from `state`'s `push.json` (under the
/// push lock): the entry whose URL is `url`, or prints as `url`
/// ([`super::redact_url`]). Returns its URL and what it held, `None` when
/// there is none. Nothing on the remote changes; a later push to it
/// starts afresh (and finds its refs there).
///
/// Errors: the push lock, or `push.json`, cannot be read or written.
pub fn forget(state: &StateDir, url: &str) -> io::Result<Option<(String, RemoteState)>> {
    let _lock = crate::state::lock::FileLock::exclusive(&state.push_lock_path())?;
    let mut all = load(state)?;
    let key = all
        .remotes
        .keys()
        .find(|k| k.as_str() == url)
        .or_else(|| all.remotes.keys().find(|k| super::redact_url(k) == url))
        .cloned();
    let Some(key) = key else {
        return Ok(None);
    };
    let gone = all.remotes.remove(&key);
    save(state, &all)?;
    Ok(gone.map(|r| (key, r)))
}

/// Replaces the push state of `state`'s project by `s` (temporary file,
/// then rename: a crash leaves the old file or the new one). Not fsynced:
/// losing it costs one push that finds its refs already there.
///
/// Errors: the file cannot be written.
pub(super) fn save(state: &StateDir, s: &PushState) -> io::Result<()> {
    let path = state.push_state_path();
    let tmp = tmp_of(&path);
    let bytes = serde_json::to_vec_pretty(s).map_err(io::Error::other)?;
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, &path)
}

fn tmp_of(path: &Path) -> std::path::PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".tmp");
    name.into()
}

/// Now, in ms since the Unix epoch.
pub(super) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

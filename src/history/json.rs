//! The JSON forms of history that `opfs log --json` and `opfs show
//! N:PATH --json` print and the MCP tools `history_log` and
//! `history_show` return (`docs/mcp.md`): one builder for both, so the two
//! can never disagree.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};

use crate::paths;
use crate::store::index::OutsideEdit;

use super::{LogEntry, Shown};

/// `ns` (nanoseconds since the Unix epoch; negative values clamp to the
/// epoch) as RFC 3339 UTC with whole seconds, e.g. `2026-12-01T23:25:20Z`.
pub fn rfc3339(ns: i64) -> String {
    let t = std::time::UNIX_EPOCH + Duration::from_nanos(ns.max(0) as u64);
    humantime::format_rfc3339_seconds(t).to_string()
}

/// The JSON array of `opfs log --json`: one object per entry, in the
/// order given (newest first from [`super::log`]); times both as RFC 3339
/// (`started_at`, `ended_at`) and as nanoseconds (`*_ns`). Each entry
/// lists the edits behind the mount kept in its turn (`outside_edits`,
/// from `kept`) and, when `git_changes` names its turn, the paths git
/// runs or trusts that it changed (`git_changes`).
pub fn log_json(
    entries: &[LogEntry],
    kept: &[OutsideEdit],
    git_changes: &BTreeMap<u64, Vec<String>>,
) -> Value {
    Value::Array(
        entries
            .iter()
            .map(|e| {
                let mut v = json!({
                    "turn": e.turn,
                    "kind": e.kind,
                    "label": e.label,
                    "external_id": e.external_id,
                    "started_at": rfc3339(e.started_at),
                    "ended_at": e.ended_at.map(rfc3339),
                    "started_at_ns": e.started_at,
                    "ended_at_ns": e.ended_at,
                    "rewound_to": e.rewound_to,
                    "added": e.added,
                    "modified": e.modified,
                    "deleted": e.deleted,
                    "paths": e.paths,
                    "bytes_stored": e.bytes_stored,
                    "ignored": e.ignored,
                });
                if let Some(paths) = git_changes.get(&e.turn) {
                    v["git_changes"] = json!(paths);
                }
                v["outside_edits"] = kept
                    .iter()
                    .filter(|k| k.turn == e.turn)
                    .map(super::outside_json)
                    .collect();
                v
            })
            .collect(),
    )
}

/// The JSON object of `opfs show N:PATH --json` for `shown`, found at
/// `path` (project-relative raw bytes) when turn `turn` began: `kind`
/// `file` with `perm` (octal text), `size` and `content_base64`, or `kind`
/// `symlink` with `target` (rendered) and `target_base64` (exact).
pub fn show_json(turn: u64, path: &[u8], shown: &Shown) -> Value {
    let mut v = json!({ "turn": turn, "path": paths::display(path) });
    match shown {
        Shown::File { bytes, perm } => {
            v["kind"] = "file".into();
            v["perm"] = format!("{perm:04o}").into();
            v["size"] = bytes.len().into();
            v["content_base64"] = base64(bytes).into();
        }
        Shown::Symlink { target } => {
            v["kind"] = "symlink".into();
            v["target"] = paths::display(target).into();
            v["target_base64"] = base64(target).into();
        }
    }
    v
}

/// Standard base64 (RFC 4648, with `=` padding).
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc_4648() {
        for (plain, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(plain.as_bytes()), encoded, "{plain:?}");
        }
        assert_eq!(base64(&[0xff, 0xfe, 0x00]), "//4A");
    }

    #[test]
    fn times_and_shown_entries_render() {
        assert_eq!(rfc3339(1_500_000_000_123), "1970-01-01T00:25:00Z");
        assert_eq!(rfc3339(-5), "1970-01-01T00:00:00Z");
        let v = show_json(
            2,
            b"caf\xe9",
            &Shown::File {
                bytes: b"hi".to_vec(),
                perm: 0o644,
            },
        );
        assert_eq!(
            v,
            json!({"turn": 2, "path": "caf\\xe9", "kind": "file", "perm": "0644",
                   "size": 2, "content_base64": "aGk="})
        );
        let v = show_json(
            1,
            b"l",
            &Shown::Symlink {
                target: b"t".to_vec(),
            },
        );
        assert_eq!(v["target"], "t");
        assert_eq!(v["target_base64"], "dA==");
    }
}

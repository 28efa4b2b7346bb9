//! The "user prompt submitted" hook event each agent sends on stdin, and
//! the answer each expects (`opfs hook`, `docs/integrations.md`).
//!
//! | agent | event (`hook_event_name`) | fields used |
//! | --- | --- | --- |
//! | Claude Code | `UserPromptSubmit` | `prompt`, `session_id`, `cwd` |
//! | Codex CLI | `UserPromptSubmit` (with `turn_id`) | `prompt`, `session_id`, `cwd` |
//! | Gemini CLI | `BeforeAgent` | `prompt`, `session_id`, `cwd` |
//!
//! All three take the same answers on exit 0, as one JSON object on
//! stdout: `systemMessage`, shown to the user (when the agent shows it:
//! `codex exec` and `claude -p` do not); `hookSpecificOutput` with the
//! event's `hookEventName` and `additionalContext`, text added to the
//! model's context for this prompt, so the model itself tells the user,
//! in every mode; and `decision: "block"` with a `reason`, which drops the
//! prompt and shows the reason. Exit 2 with the reason on stderr blocks the
//! prompt too. Hooks run without a terminal, so nothing is written to
//! one. The parser is a real JSON parser (`serde_json`), so a prompt with
//! quotes, backslashes, newlines or any Unicode arrives intact; other
//! fields are ignored.

use std::path::PathBuf;

use serde_json::Value;

use super::Agent;

/// The most bytes of hook input read (a prompt larger than this is not a
/// prompt a person typed; the hook refuses it rather than hold it all).
pub const MAX_EVENT_BYTES: usize = 16 << 20;

/// One prompt-submitted event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookEvent {
    /// Which agent sent it (given, or told from the event's shape).
    pub agent: Agent,
    /// The user's message, exactly as the agent passed it; `None` when
    /// absent or empty.
    pub prompt: Option<String>,
    /// The agent's session id (`session_id`), if any.
    pub session_id: Option<String>,
    /// The agent's working directory (`cwd`), if any.
    pub cwd: Option<PathBuf>,
}

/// Why a hook event could not be read.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// The input is not one JSON object.
    #[error(
        "the hook input on stdin is not a JSON object ({0}): the agent must pass its \
         hook event as JSON on stdin"
    )]
    NotJson(String),
    /// A field has the wrong type.
    #[error("the hook event's field {field} is not a string")]
    FieldType {
        /// The field.
        field: &'static str,
    },
    /// The event is not one opfs knows, and `--agent` was not given.
    #[error(
        "cannot tell which agent sent this hook event (hook_event_name {0}): pass \
         --agent claude-code|codex|gemini"
    )]
    UnknownAgent(String),
    /// `--agent aider`: aider has no hooks.
    #[error("aider has no hook mechanism: use `opfs run --turn` (docs/integrations.md)")]
    NoHooks,
}

/// `input` with every `\uXXXX` escape of a UTF-16 surrogate that is not
/// half of a pair replaced by `\ufffd`; borrowed when there is none. Only
/// escapes are looked at (a backslash always starts one in JSON text, and
/// `\\` is skipped whole), so nothing else changes.
fn replace_lone_surrogates(input: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    fn unit_at(b: &[u8], i: usize) -> Option<u16> {
        // `\uXXXX` at `i`.
        let esc = b.get(i..i + 6)?;
        if esc[0] != b'\\' || esc[1] != b'u' {
            return None;
        }
        u16::from_str_radix(std::str::from_utf8(&esc[2..]).ok()?, 16).ok()
    }
    let is_high = |u: u16| (0xD800..0xDC00).contains(&u);
    let is_low = |u: u16| (0xDC00..0xE000).contains(&u);
    let mut out: Option<Vec<u8>> = None;
    let mut copied = 0;
    let mut i = 0;
    while i < input.len() {
        if input[i] != b'\\' {
            i += 1;
            continue;
        }
        let Some(u) = unit_at(input, i) else {
            // Another escape (`\\`, `\"`, `\n`...): both bytes at once.
            i += 2;
            continue;
        };
        if is_high(u) && unit_at(input, i + 6).is_some_and(is_low) {
            i += 12;
            continue;
        }
        if is_high(u) || is_low(u) {
            let o = out.get_or_insert_with(Vec::new);
            o.extend_from_slice(&input[copied..i]);
            o.extend_from_slice(b"\\ufffd");
            copied = i + 6;
        }
        i += 6;
    }
    match out {
        Some(mut o) => {
            o.extend_from_slice(&input[copied..]);
            std::borrow::Cow::Owned(o)
        }
        None => std::borrow::Cow::Borrowed(input),
    }
}

/// Reads one event. `agent` is `--agent`, if given; otherwise the agent is
/// told from the event: `BeforeAgent` is Gemini CLI, `UserPromptSubmit`
/// with a `turn_id` is Codex, without one Claude Code.
///
/// Errors: [`HookError`] for input that is not a JSON object, a field of
/// the wrong type, or an event opfs cannot place.
///
/// A `\uXXXX` escape of a lone UTF-16 surrogate (what JavaScript's
/// `JSON.stringify` writes for a string holding half an emoji, say) is read
/// as U+FFFD, the replacement character: the prompt labels the turn, and a
/// label with one character replaced beats no turn at all.
pub fn parse_event(input: &[u8], agent: Option<Agent>) -> Result<HookEvent, HookError> {
    let input = replace_lone_surrogates(input);
    let v: Value = serde_json::from_slice(&input).map_err(|e| HookError::NotJson(e.to_string()))?;
    let obj = v
        .as_object()
        .ok_or_else(|| HookError::NotJson("not an object".into()))?;
    let text = |field: &'static str| -> Result<Option<String>, HookError> {
        match obj.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(HookError::FieldType { field }),
        }
    };
    let event = text("hook_event_name")?;
    let agent = match agent {
        Some(Agent::Aider) => return Err(HookError::NoHooks),
        Some(a) => a,
        None => match event.as_deref() {
            Some("BeforeAgent") => Agent::Gemini,
            Some("UserPromptSubmit") if obj.contains_key("turn_id") => Agent::Codex,
            Some("UserPromptSubmit") => Agent::ClaudeCode,
            other => {
                return Err(HookError::UnknownAgent(match other {
                    Some(e) => format!("{e:?}"),
                    None => "missing".into(),
                }))
            }
        },
    };
    Ok(HookEvent {
        agent,
        prompt: text("prompt")?.filter(|p| !p.is_empty()),
        session_id: text("session_id")?.filter(|s| !s.is_empty()),
        cwd: text("cwd")?.filter(|c| !c.is_empty()).map(PathBuf::from),
    })
}

/// What the hook prints and how it exits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookReply {
    /// For stdout (empty: nothing).
    pub stdout: String,
    /// For stderr (empty: nothing).
    pub stderr: String,
    /// The exit code.
    pub code: i32,
}

/// The answer when the turn was opened: nothing for Claude Code and Codex
/// (whose plain stdout would become context for the model), `{}` for
/// Gemini CLI (which parses stdout as JSON).
pub fn opened(agent: Option<Agent>) -> HookReply {
    HookReply {
        stdout: if agent == Some(Agent::Gemini) {
            "{}\n".into()
        } else {
            String::new()
        },
        stderr: String::new(),
        code: 0,
    }
}

/// The event name `agent` puts in `hookSpecificOutput.hookEventName`.
pub fn event_name(agent: Agent) -> &'static str {
    match agent {
        Agent::Gemini => "BeforeAgent",
        _ => "UserPromptSubmit",
    }
}

/// `{"systemMessage": message}` plus, when the agent is known, the
/// `hookSpecificOutput` that adds `context` to the model's context.
fn message_and_context(agent: Option<Agent>, message: &str, context: &str) -> String {
    let mut v = serde_json::json!({ "systemMessage": message });
    if let Some(agent) = agent.filter(|a| *a != Agent::Aider) {
        v["hookSpecificOutput"] = serde_json::json!({
            "hookEventName": event_name(agent),
            "additionalContext": context,
        });
    }
    format!("{v}\n")
}

/// What the model is told when this message's changes are not recorded
/// (`reason`, with its fix).
pub fn not_recorded_context(reason: &str) -> String {
    let reason = reason.strip_prefix("opfs: ").unwrap_or(reason);
    format!(
        "[opfs] The user protects this project with opfs, which records every file change \
         per message so the user can rewind it. For this message opfs could NOT open a turn, \
         so the file changes you make now are NOT recorded and cannot be rewound. Reason and \
         fix: {reason}. (To protect a project: `opfs mount PROJECT MOUNTPOINT` and start the \
         agent in MOUNTPOINT, or start the agent with `opfs run -C PROJECT -- AGENT`.) Tell \
         the user this, with the fix, at the start of your reply, before you change any file."
    )
}

/// The answer when the turn was opened but the project needs the user's
/// attention (`warning`, e.g. a rewind that stopped half way): a
/// `systemMessage` shown to the user, the same in the model's context (so
/// it is said in every mode) and on stderr; exit 0.
pub fn opened_with_warning(agent: Option<Agent>, warning: &str) -> HookReply {
    let msg = format!(
        "opfs: {}",
        warning.strip_prefix("opfs: ").unwrap_or(warning)
    );
    let context = format!(
        "[opfs] The user protects this project with opfs, and it needs the user's attention: \
         {}. Tell the user this at the start of your reply.",
        warning.strip_prefix("opfs: ").unwrap_or(warning)
    );
    HookReply {
        stdout: message_and_context(agent, &msg, &context),
        stderr: format!("{msg}\n"),
        code: 0,
    }
}

/// The answer that drops the prompt (`decision: "block"`, which every
/// agent here takes, with `reason` shown to the user) and exits 0; the
/// reason on stderr too. For a situation that is certainly a mistake: the
/// session works in the backing directory of a project opfs serves.
pub fn blocked(reason: &str) -> HookReply {
    let reason = format!("opfs: {}", reason.strip_prefix("opfs: ").unwrap_or(reason));
    HookReply {
        stdout: format!(
            "{}\n",
            serde_json::json!({ "decision": "block", "reason": reason })
        ),
        stderr: format!("{reason}\n"),
        code: 0,
    }
}

/// The message shown when no turn was opened, for `reason`.
pub fn not_recorded_message(reason: &str) -> String {
    let reason = reason.strip_prefix("opfs: ").unwrap_or(reason);
    format!(
        "opfs: no turn was opened for this message, so its changes are NOT recorded and \
         cannot be rewound: {reason}"
    )
}

/// `opfs turn`'s reason why no turn was opened, as advice for the person
/// behind an agent: the way out of `turn --allow-unmounted` is no choice
/// a hook gives them (`opfs run` is).
pub fn for_the_hook(reason: &str) -> String {
    const TURN_ONLY: &str = ", or pass --allow-unmounted to open the turn in its state dir anyway";
    match reason.find(TURN_ONLY) {
        Some(at) => format!(
            "{}, or start the agent with `opfs run AGENT` in the project{}",
            &reason[..at],
            &reason[at + TURN_ONLY.len()..]
        ),
        None => reason.to_string(),
    }
}

/// The answer when no turn was opened (for `reason`): the message on
/// stderr always; then, by default, exit 0 with `{"systemMessage": MSG}`
/// on stdout and, for a known `agent`, [`not_recorded_context`] added to
/// the model's context (the agent goes on, unprotected, and the model
/// tells the user even where the agent does not show `systemMessage`);
/// with `strict`, exit 2, which every agent here takes as "block this
/// prompt" and whose stderr it shows.
pub fn not_opened(agent: Option<Agent>, reason: &str, strict: bool) -> HookReply {
    let msg = not_recorded_message(reason);
    HookReply {
        stdout: if strict {
            String::new()
        } else {
            message_and_context(agent, &msg, &not_recorded_context(reason))
        },
        stderr: format!("{msg}\n"),
        code: if strict { 2 } else { 0 },
    }
}

/// The answer inside `opfs run`'s sandbox (`OPFS_SANDBOX` set, not
/// `danger-full-access`) when the hook could not open a turn there: no
/// narrow socket (`--sandbox read-only`, `--worktree`), or it refused or
/// failed for `reason`. No hook there can reach the daemon (guarantee 8),
/// but the mount records everything, into the turn that is open; so exit
/// 0 with a `systemMessage` saying so and, for a known `agent`, the same
/// in the model's context, even when strict.
pub fn in_sandbox(agent: Option<Agent>, reason: Option<&str>) -> HookReply {
    let why = match reason {
        Some(r) => format!(" ({})", r.strip_prefix("opfs: ").unwrap_or(r)),
        None => " (OPFS_MCP_SOCKET is not set: the run has no narrow socket, as with \
                  --sandbox read-only or --worktree, or the agent did not pass it to its hook)"
            .into(),
    };
    let msg = format!(
        "opfs: inside opfs run's sandbox this hook cannot open turns{why}; this message's \
         changes are recorded in the turn that is open (`opfs run --turn LABEL`, the run's \
         own turn, or `opfs turn` from a terminal outside the sandbox starts the next), not \
         in a turn of its own"
    );
    let context = format!(
        "[opfs] The user protects this project with opfs. For this message opfs could not open \
         a turn of its own{why}: the file changes you make now ARE recorded, but together with \
         the earlier ones in the turn that is open, so the user cannot rewind this message \
         alone. Tell the user this briefly at the start of your reply."
    );
    HookReply {
        stdout: message_and_context(agent, &msg, &context),
        stderr: format!("{msg}\n"),
        code: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_agent_is_told_from_its_event() {
        let claude = br#"{"session_id":"s1","transcript_path":"/t","cwd":"/w","hook_event_name":"UserPromptSubmit","prompt":"say \"hi\"\nthen \\ bye \u00e9"}"#;
        let e = parse_event(claude, None).expect("claude");
        assert_eq!(e.agent, Agent::ClaudeCode);
        assert_eq!(e.prompt.as_deref(), Some("say \"hi\"\nthen \\ bye é"));
        assert_eq!(e.session_id.as_deref(), Some("s1"));
        assert_eq!(e.cwd, Some(PathBuf::from("/w")));
        let codex = br#"{"session_id":"s2","turn_id":"t","cwd":"/w","hook_event_name":"UserPromptSubmit","model":"m","permission_mode":"default","transcript_path":null,"prompt":"p"}"#;
        assert_eq!(parse_event(codex, None).expect("codex").agent, Agent::Codex);
        let gemini = br#"{"session_id":"s3","cwd":"/w","hook_event_name":"BeforeAgent","timestamp":"2026-01-01T00:00:00Z","prompt":"p"}"#;
        assert_eq!(
            parse_event(gemini, None).expect("gemini").agent,
            Agent::Gemini
        );
        // --agent wins over the shape.
        assert_eq!(
            parse_event(claude, Some(Agent::Codex))
                .expect("given")
                .agent,
            Agent::Codex
        );
    }

    #[test]
    fn a_lone_surrogate_in_the_prompt_is_read_as_the_replacement_character() {
        let ev = |prompt: &str| {
            format!(
                r#"{{"hook_event_name":"UserPromptSubmit","session_id":"s","prompt":"{prompt}"}}"#
            )
        };
        let prompt = |text: &str| {
            parse_event(ev(text).as_bytes(), None)
                .expect("event")
                .prompt
        };
        // Alone, high or low, at the end, twice; a pair stays a pair; an
        // escaped backslash before `u` is text, not an escape.
        assert_eq!(prompt(r"a \ud800 b").as_deref(), Some("a \u{fffd} b"));
        assert_eq!(prompt(r"\udc00").as_deref(), Some("\u{fffd}"));
        assert_eq!(prompt(r"x\ud83d").as_deref(), Some("x\u{fffd}"));
        assert_eq!(
            prompt(r"\ud800\ud800\ude00").as_deref(),
            Some("\u{fffd}\u{10200}")
        );
        assert_eq!(prompt(r"\ud83d\ude00").as_deref(), Some("\u{1f600}"));
        assert_eq!(prompt(r"\\ud800").as_deref(), Some(r"\ud800"));
        assert_eq!(prompt(r#"q\"\ud800"#).as_deref(), Some("q\"\u{fffd}"));
        // Input without one is passed through as it is.
        assert!(matches!(
            replace_lone_surrogates(br#"{"a":"\ud83d\ude00 \\ud800"}"#),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    #[test]
    fn bad_events_are_refused_with_the_reason() {
        assert!(matches!(
            parse_event(b"prompt=x", None),
            Err(HookError::NotJson(_))
        ));
        assert!(matches!(
            parse_event(b"[]", None),
            Err(HookError::NotJson(_))
        ));
        assert!(matches!(
            parse_event(br#"{"prompt":"x"}"#, None),
            Err(HookError::UnknownAgent(_))
        ));
        assert!(matches!(
            parse_event(
                br#"{"hook_event_name":"UserPromptSubmit","prompt":3}"#,
                None
            ),
            Err(HookError::FieldType { field: "prompt" })
        ));
        assert!(matches!(
            parse_event(br#"{"prompt":"x"}"#, Some(Agent::Aider)),
            Err(HookError::NoHooks)
        ));
        // An empty prompt is no label.
        let e = parse_event(br#"{"prompt":""}"#, Some(Agent::ClaudeCode)).expect("empty");
        assert_eq!(e.prompt, None);
    }

    #[test]
    fn replies() {
        assert_eq!(opened(Some(Agent::ClaudeCode)).stdout, "");
        assert_eq!(opened(Some(Agent::Gemini)).stdout, "{}\n");
        let r = not_opened(None, "opfs: no daemon \"x\"", false);
        assert_eq!(r.code, 0);
        let v: Value = serde_json::from_str(&r.stdout).expect("json");
        assert_eq!(
            v["systemMessage"],
            "opfs: no turn was opened for this message, so its changes are NOT recorded \
             and cannot be rewound: no daemon \"x\""
        );
        assert!(v.get("hookSpecificOutput").is_none(), "{v}");
        for (agent, event) in [
            (Agent::ClaudeCode, "UserPromptSubmit"),
            (Agent::Codex, "UserPromptSubmit"),
            (Agent::Gemini, "BeforeAgent"),
        ] {
            let r = not_opened(Some(agent), "no daemon", false);
            let v: Value = serde_json::from_str(&r.stdout).expect("json");
            assert_eq!(v["hookSpecificOutput"]["hookEventName"], event);
            let context = v["hookSpecificOutput"]["additionalContext"]
                .as_str()
                .expect("context");
            assert!(
                context.contains("NOT recorded") && context.contains("no daemon"),
                "{context}"
            );
        }
        let b = blocked("in the backing dir");
        let v: Value = serde_json::from_str(&b.stdout).expect("json");
        assert_eq!((b.code, v["decision"].as_str()), (0, Some("block")));
        assert_eq!(v["reason"], "opfs: in the backing dir");
        let r = not_opened(Some(Agent::Codex), "why", true);
        assert_eq!((r.code, r.stdout.as_str()), (2, ""));
        assert!(r.stderr.contains("NOT recorded"));
    }
}

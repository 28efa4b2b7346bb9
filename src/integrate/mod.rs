//! One-command integrations with the coding agents people run
//! (`docs/integrations.md`): the agents' prompt-submitted hook events
//! ([`hook`]: what `opfs hook` reads and answers) and their user-level
//! configuration files ([`config`]: what `opfs integrate` merges in and
//! takes out again).
//!
//! Pure data and file edits: nothing here talks to the daemon (the CLI
//! opens the turn), prints, or reads the environment (the CLI passes
//! `$HOME` and the path of the `opfs` binary).

use std::fmt;

pub mod config;
pub mod hook;
mod json;
mod toml;

/// The agents opfs knows how to integrate with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agent {
    /// Anthropic's Claude Code: `UserPromptSubmit` hooks in
    /// `~/.claude/settings.json`, MCP servers in `~/.claude.json`.
    ClaudeCode,
    /// OpenAI's Codex CLI: `[[hooks.UserPromptSubmit]]` and
    /// `[mcp_servers.*]` in `~/.codex/config.toml`.
    Codex,
    /// Google's Gemini CLI: `BeforeAgent` hooks and `mcpServers` in
    /// `~/.gemini/settings.json`.
    Gemini,
    /// aider: no hook mechanism and no MCP client; the integration is a
    /// recipe (`opfs run --turn`), not a configuration file.
    Aider,
}

impl Agent {
    /// Every agent, in the order the docs list them.
    pub const ALL: [Agent; 4] = [Agent::ClaudeCode, Agent::Codex, Agent::Gemini, Agent::Aider];

    /// The name used on the command line (`claude-code`, `codex`,
    /// `gemini`, `aider`).
    pub fn name(self) -> &'static str {
        match self {
            Agent::ClaudeCode => "claude-code",
            Agent::Codex => "codex",
            Agent::Gemini => "gemini",
            Agent::Aider => "aider",
        }
    }

    /// The agent named `name` ([`Agent::name`]), if any.
    pub fn from_name(name: &str) -> Option<Agent> {
        Agent::ALL.into_iter().find(|a| a.name() == name)
    }
}

impl fmt::Display for Agent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `s` quoted for a POSIX shell if it needs it (the agents run hook
/// commands through `sh -c`): unchanged when it has only characters no
/// shell treats specially, else in single quotes.
pub fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+,:@%=".contains(&b));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for a in Agent::ALL {
            assert_eq!(Agent::from_name(a.name()), Some(a));
        }
        assert_eq!(Agent::from_name("claude"), None);
    }

    #[test]
    fn shell_quote_quotes_what_the_shell_would_split() {
        assert_eq!(shell_quote("/usr/bin/opfs"), "/usr/bin/opfs");
        assert_eq!(shell_quote("/a b/opfs"), "'/a b/opfs'");
        assert_eq!(shell_quote("/it's/opfs"), r"'/it'\''s/opfs'");
        assert_eq!(shell_quote(""), "''");
    }
}

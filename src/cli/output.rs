//! Output helpers shared by the commands: the format, times, and text made
//! safe for a terminal.

/// What the commands print.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// For people.
    Human,
    /// One JSON value (`--json`).
    Json,
}

impl Format {
    /// True for [`Format::Json`].
    pub fn is_json(self) -> bool {
        self == Format::Json
    }
}

/// Nanoseconds since the epoch as RFC 3339, in seconds, UTC.
pub fn rfc3339(ns: i64) -> String {
    opfs::history::rfc3339(ns)
}

/// `text` (a label, an external id, a path, a ref name or a URL someone
/// else wrote) for a terminal: control characters are escaped (`\n`,
/// `\r`, `\t`, `\x1b`; `\u{9b}` beyond ASCII), and so are format
/// characters and separators (`\u{202e}`: [`opfs::paths::is_unprintable`]),
/// so such text cannot split a row, send escape sequences or reorder what
/// is shown. JSON output keeps the text exact.
pub fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() && c.is_ascii() => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if opfs::paths::is_unprintable(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(
            printable("a\nb\tc\x1b[1m\u{9b}"),
            "a\\nb\\tc\\x1b[1m\\u{9b}"
        );
    }

    #[test]
    fn format_characters_are_escaped() {
        assert_eq!(
            printable("a\u{202e}b\u{200e}\u{200f}\u{2066}c\u{2069}\u{feff}\u{2028}"),
            "a\\u{202e}b\\u{200e}\\u{200f}\\u{2066}c\\u{2069}\\u{feff}\\u{2028}"
        );
        assert_eq!(printable("é 中 🙂"), "é 中 🙂");
    }

    #[test]
    fn times_are_utc_seconds() {
        assert_eq!(rfc3339(1_500_000_000_123), "1970-01-01T00:25:00Z");
        assert_eq!(rfc3339(-5), "1970-01-01T00:00:00Z");
    }
}

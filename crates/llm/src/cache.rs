//! How much of a prompt a provider's prompt cache could reuse: the part that is an unchanged
//! prefix of the previous call's prompt.
//!
//! A prompt is measured as providers see it, in order: each message's role, then its text parts
//! and its images. Text counts by characters (a stand-in for tokens: the share is what matters);
//! an image counts as [`IMAGE_CHARS`] characters and only matches an identical image. Automatic
//! prefix caches (OpenAI, Gemini, DeepSeek…) can reuse the whole common prefix; caches with
//! explicit breakpoints (Anthropic, Bedrock) only up to the last breakpoint inside it, which
//! [`PromptPrefix::to_breakpoint_chars`] reports.

use crate::request::{ChatRequest, ContentPart, Role};

/// What one image counts for (roughly an agent screenshot's tokens × 4 characters per token).
pub const IMAGE_CHARS: usize = 4 * 1_500;

/// The reusable prefix of one prompt against the one before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PromptPrefix {
    /// Size of the whole prompt.
    pub total_chars: usize,
    /// Size of the part that equals the start of the previous prompt.
    pub shared_chars: usize,
    /// Size of the shared part up to the last cache breakpoint within it (what a cache with
    /// explicit breakpoints can serve).
    pub to_breakpoint_chars: usize,
}

impl PromptPrefix {
    /// `current` against `previous` (`None`: the first call, nothing shared).
    pub fn measure(previous: Option<&ChatRequest>, current: &ChatRequest) -> Self {
        let current_units = units(current);
        let total_chars = current_units.iter().map(Unit::size).sum();
        let Some(previous) = previous else {
            return Self {
                total_chars,
                ..Self::default()
            };
        };
        let previous_units = units(previous);
        let mut shared_chars = 0;
        let mut to_breakpoint_chars = 0;
        for (mine, theirs) in current_units.iter().zip(&previous_units) {
            let common = mine.common_prefix(theirs);
            shared_chars += common;
            if common < mine.size() {
                break;
            }
            if mine.breakpoint_after && theirs.breakpoint_after {
                to_breakpoint_chars = shared_chars;
            }
        }
        Self {
            total_chars,
            shared_chars,
            to_breakpoint_chars,
        }
    }

    /// Adds another call's numbers (for totals over a task).
    #[must_use]
    pub fn plus(self, other: Self) -> Self {
        Self {
            total_chars: self.total_chars + other.total_chars,
            shared_chars: self.shared_chars + other.shared_chars,
            to_breakpoint_chars: self.to_breakpoint_chars + other.to_breakpoint_chars,
        }
    }

    /// `shared_chars / total_chars` (0 for an empty prompt).
    pub fn shared_share(&self) -> f64 {
        ratio(self.shared_chars, self.total_chars)
    }

    /// `to_breakpoint_chars / total_chars`.
    pub fn breakpoint_share(&self) -> f64 {
        ratio(self.to_breakpoint_chars, self.total_chars)
    }
}

#[allow(clippy::cast_precision_loss)] // prompt sizes are far below 2^52
fn ratio(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// One comparable piece of a prompt.
struct Unit<'a> {
    kind: UnitKind<'a>,
    /// A cache breakpoint follows this piece (the last piece of a marked message).
    breakpoint_after: bool,
}

enum UnitKind<'a> {
    Role(Role),
    Text(&'a str),
    Image(String),
}

impl Unit<'_> {
    fn size(&self) -> usize {
        match &self.kind {
            UnitKind::Role(_) => 1,
            UnitKind::Text(text) => text.chars().count(),
            UnitKind::Image(_) => IMAGE_CHARS,
        }
    }

    fn common_prefix(&self, other: &Unit<'_>) -> usize {
        match (&self.kind, &other.kind) {
            (UnitKind::Role(a), UnitKind::Role(b)) if a == b => 1,
            (UnitKind::Text(a), UnitKind::Text(b)) => {
                a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count()
            }
            (UnitKind::Image(a), UnitKind::Image(b)) if a == b => IMAGE_CHARS,
            _ => 0,
        }
    }
}

fn units(request: &ChatRequest) -> Vec<Unit<'_>> {
    let breakpoints = request.cache_breakpoints();
    let mut out = Vec::new();
    for (message, breakpoint) in request.messages.iter().zip(breakpoints) {
        out.push(Unit {
            kind: UnitKind::Role(message.role),
            breakpoint_after: false,
        });
        for part in &message.content {
            out.push(Unit {
                kind: match part {
                    ContentPart::Text(text) => UnitKind::Text(text),
                    ContentPart::Image(image) => UnitKind::Image(image.base64()),
                },
                breakpoint_after: false,
            });
        }
        if let Some(last) = out.last_mut() {
            last.breakpoint_after = breakpoint;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::{ChatRequest, Message, OutputSchema};

    fn request(state: &str) -> ChatRequest {
        ChatRequest::new(
            vec![Message::system("0123456789"), Message::user(state)],
            OutputSchema::new("A", json!({"type": "object"})),
        )
    }

    #[test]
    fn shared_prefix_stops_at_the_first_difference() {
        let first = request("history: a\nstate: page 1");
        let second = request("history: a b\nstate: page 2");
        let none = PromptPrefix::measure(None, &first);
        assert_eq!(none.shared_chars, 0);
        let m = PromptPrefix::measure(Some(&first), &second);
        // role + 10 system chars + role + "history: a" (10 chars).
        assert_eq!(m.shared_chars, 1 + 10 + 1 + 10);
        assert_eq!(
            m.total_chars,
            1 + 10 + 1 + "history: a b\nstate: page 2".len()
        );
        // The system prompt is the last breakpoint inside the shared part.
        assert_eq!(m.to_breakpoint_chars, 11);
        assert!(m.shared_share() > m.breakpoint_share());
        let same = PromptPrefix::measure(Some(&second), &second);
        assert_eq!(same.shared_chars, same.total_chars);
        assert_eq!(same.to_breakpoint_chars, same.total_chars);
    }
}

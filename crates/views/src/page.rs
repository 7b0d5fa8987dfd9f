//! The page as a capture describes it, and a browser failure as its caller sees it.

use serde::{Deserialize, Serialize};

/// One open tab, as the model sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TabInfo {
    /// Last four characters of the target id (what `switch` / `close` take).
    pub tab_id: String,
    /// Current URL.
    pub url: String,
    /// Page title.
    pub title: String,
}

/// Viewport, page size and scroll position of the focused tab in CSS pixels (browser-use's
/// `PageInfo`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageInfo {
    pub viewport_width: i64,
    pub viewport_height: i64,
    pub page_width: i64,
    pub page_height: i64,
    pub scroll_x: i64,
    pub scroll_y: i64,
    /// Content above the viewport.
    pub pixels_above: i64,
    /// Content below the viewport.
    pub pixels_below: i64,
    /// Content left of the viewport.
    pub pixels_left: i64,
    /// Content right of the viewport.
    pub pixels_right: i64,
}

impl PageInfo {
    /// Pages of content above the viewport.
    pub fn pages_above(&self) -> f64 {
        self.pages(self.pixels_above)
    }

    /// Pages of content below the viewport.
    pub fn pages_below(&self) -> f64 {
        self.pages(self.pixels_below)
    }

    fn pages(&self, pixels: i64) -> f64 {
        if self.viewport_height > 0 {
            pixels as f64 / self.viewport_height as f64
        } else {
            0.0
        }
    }
}

/// Counts shown in browser-use's `<page_stats>` line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageStats {
    /// `<a>` elements.
    pub links: usize,
    pub iframes: usize,
    /// Open shadow roots.
    pub shadow_open: usize,
    /// Closed shadow roots.
    pub shadow_closed: usize,
    pub scroll_containers: usize,
    pub images: usize,
    /// Indexed (interactive) elements.
    pub interactive_elements: usize,
    /// All elements.
    pub total_elements: usize,
    pub text_chars: usize,
}

/// Screenshot encoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScreenshotFormat {
    /// JPEG with a quality of 0–100.
    Jpeg {
        quality: u8,
    },
    Png,
}

impl ScreenshotFormat {
    /// The MIME type of images in this format.
    pub fn mime(self) -> &'static str {
        match self {
            ScreenshotFormat::Png => "image/png",
            ScreenshotFormat::Jpeg { .. } => "image/jpeg",
        }
    }
}

/// An encoded screenshot of the viewport.
#[derive(Clone, PartialEq, Eq)]
pub struct Screenshot {
    pub format: ScreenshotFormat,
    /// The encoded image.
    pub data: Vec<u8>,
    /// Image width in pixels (0 = unknown).
    pub width: u32,
    /// Image height in pixels (0 = unknown).
    pub height: u32,
}

impl Screenshot {
    /// The MIME type of [`Screenshot::data`] (`image/png`, `image/jpeg`).
    pub fn mime(&self) -> &'static str {
        self.format.mime()
    }
}

impl std::fmt::Debug for Screenshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Screenshot({}, {} bytes)", self.mime(), self.data.len())
    }
}

/// One chunk of a page's markdown, for `extract`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MarkdownChunk {
    /// The chunk starting at `stats.start_from_char`.
    pub content: String,
    /// browser-use's `<content_stats>` figures.
    pub stats: ContentStats,
}

impl MarkdownChunk {
    /// Characters of markdown handed to the model per `extract` call (browser-use's chunk
    /// size).
    pub const MAX_CHARS: usize = 100_000;

    /// The chunk of `markdown` starting at `start_from_char` (counted in characters): at most
    /// [`MarkdownChunk::MAX_CHARS`], ending at a line break when one is in its last 5 %.
    /// `original_html_chars` is reported in the stats.
    pub fn cut(
        markdown: &str,
        start_from_char: usize,
        original_html_chars: usize,
    ) -> Result<Self, String> {
        let total = markdown.chars().count();
        if start_from_char > 0 && start_from_char >= total {
            return Err(format!(
                "start_from_char ({start_from_char}) is beyond the page content ({total} characters)"
            ));
        }
        let mut content: String = markdown
            .chars()
            .skip(start_from_char)
            .take(Self::MAX_CHARS)
            .collect();
        let mut chunk_chars = content.chars().count();
        let mut next = None;
        if start_from_char + chunk_chars < total {
            // Prefer to end on a line break in the last 5 % of the chunk.
            if let Some(cut) = content.rfind('\n') {
                let cut_chars = content[..cut].chars().count();
                if cut_chars > Self::MAX_CHARS * 95 / 100 {
                    content.truncate(cut);
                    chunk_chars = cut_chars;
                }
            }
            next = Some(start_from_char + chunk_chars);
        }
        Ok(Self {
            content,
            stats: ContentStats {
                original_html_chars,
                total_markdown_chars: total,
                start_from_char,
                chunk_chars,
                next_start_char: next,
            },
        })
    }
}

/// How a page's markdown was cut (reported to the extraction model).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContentStats {
    pub original_html_chars: usize,
    pub total_markdown_chars: usize,
    pub start_from_char: usize,
    pub chunk_chars: usize,
    /// Where the next chunk starts, when the page continues.
    pub next_start_char: Option<usize>,
}

/// A browser call that failed (capture, lookup), as its caller sees it. Failed actions are
/// [`ActionResult::error`](crate::ActionResult::error) instead.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{message}")]
pub struct BrowserFailure {
    /// What went wrong.
    pub message: String,
    /// The browser is gone: the task cannot go on.
    pub fatal: bool,
}

impl BrowserFailure {
    /// A recoverable failure.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            fatal: false,
        }
    }

    /// The browser died or disconnected.
    pub fn fatal(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            fatal: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_is_cut_in_chunks() {
        let long = "a".repeat(MarkdownChunk::MAX_CHARS + 10);
        let first = MarkdownChunk::cut(&long, 0, 7).expect("first");
        assert_eq!(first.stats.next_start_char, Some(MarkdownChunk::MAX_CHARS));
        assert_eq!(first.stats.original_html_chars, 7);
        let rest = MarkdownChunk::cut(&long, MarkdownChunk::MAX_CHARS, 7).expect("rest");
        assert_eq!(rest.content.len(), 10);
        assert_eq!(rest.stats.next_start_char, None);
        assert!(MarkdownChunk::cut("abc", 3, 3).is_err());
        assert_eq!(MarkdownChunk::cut("", 0, 0).expect("empty").content, "");
    }

    #[test]
    fn pages_above_and_below() {
        let info = PageInfo {
            viewport_height: 500,
            pixels_above: 250,
            pixels_below: 1000,
            ..PageInfo::default()
        };
        assert!((info.pages_above() - 0.5).abs() < 1e-9);
        assert!((info.pages_below() - 2.0).abs() < 1e-9);
        assert!(PageInfo::default().pages_below().abs() < 1e-9);
    }
}

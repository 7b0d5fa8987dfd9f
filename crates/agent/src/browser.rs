//! The browser side of the agent, as a trait: capture the page, list the actions, run one.
//!
//! The real implementation is a thin adapter over `browserd-browser`; tests use a fake.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::views::{ActionResult, InteractedElement};

/// One open tab.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TabInfo {
    /// Last 4 characters of the target id (what `switch` / `close` take).
    pub tab_id: String,
    /// Current URL.
    pub url: String,
    /// Page title.
    pub title: String,
}

/// Viewport, page size and scroll position in CSS pixels.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PageInfo {
    /// Viewport width.
    pub viewport_width: u32,
    /// Viewport height.
    pub viewport_height: u32,
    /// Full page width.
    pub page_width: u32,
    /// Full page height.
    pub page_height: u32,
    /// Horizontal scroll offset.
    pub scroll_x: u32,
    /// Vertical scroll offset.
    pub scroll_y: u32,
    /// Content above the viewport.
    pub pixels_above: u32,
    /// Content below the viewport.
    pub pixels_below: u32,
}

/// Element counts shown in `<page_stats>`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageStats {
    /// `<a>` elements.
    pub links: u32,
    /// Indexed (interactive) elements.
    pub interactive: u32,
    /// Iframes.
    pub iframes: u32,
    /// Open shadow roots.
    pub shadow_open: u32,
    /// Closed shadow roots.
    pub shadow_closed: u32,
    /// Images.
    pub images: u32,
    /// All elements.
    pub total: u32,
}

/// A screenshot of the viewport.
#[derive(Clone, PartialEq, Eq)]
pub struct Screenshot {
    /// Image bytes.
    pub bytes: Vec<u8>,
    /// MIME type (`image/png`, `image/jpeg`).
    pub mime: String,
}

impl std::fmt::Debug for Screenshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Screenshot({}, {} bytes)", self.mime, self.bytes.len())
    }
}

/// What the agent sees of the browser at the start of a step.
#[derive(Debug, Clone, Default)]
pub struct BrowserState {
    /// URL of the focused tab.
    pub url: String,
    /// Title of the focused tab.
    pub title: String,
    /// All tabs.
    pub tabs: Vec<TabInfo>,
    /// 4-char id of the focused tab, when known (else matched by URL and title).
    pub current_tab_id: Option<String>,
    /// Sizes and scroll position.
    pub page_info: Option<PageInfo>,
    /// Element counts.
    pub page_stats: Option<PageStats>,
    /// The serialized DOM (`[index]<tag …>` lines) in browser-use's format.
    pub llm_text: String,
    /// Number of indexed elements (page-stagnation fingerprint).
    pub element_count: usize,
    /// Viewport screenshot, when asked for and available.
    pub screenshot: Option<Screenshot>,
    /// Messages of JavaScript dialogs closed automatically since the last capture.
    pub closed_dialogs: Vec<String>,
    /// Absolute paths of files downloaded in this session.
    pub downloaded_files: Vec<String>,
    /// A problem capturing the page (the rest may be partial).
    pub error: Option<String>,
}

/// One action the browser offers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActionSpec {
    /// Name as the model writes it (`click`, `navigate`, …).
    pub name: String,
    /// What it does (may be empty).
    pub description: String,
    /// JSON Schema of the parameters object.
    pub params_schema: Value,
    /// The page is expected to change: no further actions of the step run after it.
    pub terminates_sequence: bool,
    /// Domain patterns where the action is offered; empty = everywhere.
    #[serde(default)]
    pub domains: Vec<String>,
}

/// The focused tab, for the "page changed under the sequence" guard.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FocusInfo {
    /// 4-char tab id.
    pub tab_id: String,
    /// Its URL.
    pub url: String,
}

/// What `extract` wants from the page.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MarkdownOptions {
    /// Keep link targets.
    pub extract_links: bool,
    /// Keep image references.
    pub extract_images: bool,
}

/// The focused page as markdown.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PageMarkdown {
    /// URL of the page.
    pub url: String,
    /// The content.
    pub markdown: String,
}

/// A browser-side failure (capture, lookup). Action failures are [`ActionResult::error`] instead.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct BrowserError {
    /// What went wrong.
    pub message: String,
    /// The browser is gone: the task cannot go on.
    pub fatal: bool,
}

impl BrowserError {
    /// A recoverable error.
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

/// The browser as the agent uses it. Every method must bound its own time (CDP timeouts).
#[async_trait]
pub trait AgentBrowser: Send + Sync {
    /// Captures the focused page.
    async fn capture(&self, include_screenshot: bool) -> Result<BrowserState, BrowserError>;

    /// A screenshot of the focused page alone, for the history record of a step whose model
    /// call does not need the image (it is taken concurrently with that step's capture and
    /// the model call). `None` when the browser takes no screenshots.
    async fn screenshot(&self) -> Result<Option<Screenshot>, BrowserError>;

    /// The actions the browser runs (their parameter schemas, sequence semantics).
    fn action_specs(&self) -> Vec<ActionSpec>;

    /// Runs one action with parameters already stripped of secret placeholders.
    async fn execute(&self, name: &str, params: &Value) -> Result<ActionResult, BrowserError>;

    /// The focused tab now.
    async fn focused_tab(&self) -> Result<FocusInfo, BrowserError>;

    /// The focused page as markdown, for `extract`.
    async fn extract_markdown(
        &self,
        options: &MarkdownOptions,
    ) -> Result<PageMarkdown, BrowserError>;

    /// The element behind `index` in the last capture, for the history record.
    async fn describe_element(&self, _index: u64) -> Option<InteractedElement> {
        None
    }
}

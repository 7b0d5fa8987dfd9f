//! The browser side of the agent, as a trait: capture the page, list the actions, run one.
//!
//! The real implementation is a thin adapter over `browserd-browser`; tests use a fake.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use browserd_views::{
    ActionResult, BrowserFailure, MarkdownChunk, PageInfo, PageStats, Screenshot, TabInfo,
};

use crate::views::InteractedElement;

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
    /// What went wrong in the browser and was repaired since the last capture (a crashed tab
    /// replaced), browser-use's `browser_errors`.
    pub browser_errors: Vec<String>,
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
    /// The model's query (the browser keeps images when it asks for them).
    pub query: String,
    /// Keep link targets.
    pub extract_links: bool,
    /// Keep image references.
    pub extract_images: bool,
    /// First character of the chunk, in the page's markdown.
    pub start_from_char: usize,
}

/// The focused page as markdown: one chunk and where it comes from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PageMarkdown {
    /// URL of the page.
    pub url: String,
    /// The chunk asked for, with the figures of the whole page.
    pub chunk: MarkdownChunk,
}

/// The browser as the agent uses it. Every method must bound its own time (CDP timeouts).
#[async_trait]
pub trait AgentBrowser: Send + Sync {
    /// Captures the focused page.
    async fn capture(&self, include_screenshot: bool) -> Result<BrowserState, BrowserFailure>;

    /// A screenshot of the focused page alone, for the history record of a step whose model
    /// call does not need the image (it is taken concurrently with that step's capture and
    /// the model call). `None` when the browser takes no screenshots.
    async fn screenshot(&self) -> Result<Option<Screenshot>, BrowserFailure>;

    /// The actions the browser runs (their parameter schemas, sequence semantics).
    fn action_specs(&self) -> Vec<ActionSpec>;

    /// Runs one action with parameters already stripped of secret placeholders.
    async fn execute(&self, name: &str, params: &Value) -> Result<ActionResult, BrowserFailure>;

    /// The focused tab now.
    async fn focused_tab(&self) -> Result<FocusInfo, BrowserFailure>;

    /// The focused page as markdown, for `extract`.
    async fn extract_markdown(
        &self,
        options: &MarkdownOptions,
    ) -> Result<PageMarkdown, BrowserFailure>;

    /// The element behind `index` in the last capture, for the history record.
    async fn describe_element(&self, _index: u64) -> Option<InteractedElement> {
        None
    }

    /// Every indexed element of the last capture, described as [`describe_element`] does, in
    /// index order (a replay finds a recorded element again among them).
    ///
    /// [`describe_element`]: AgentBrowser::describe_element
    async fn elements(&self) -> Vec<InteractedElement> {
        Vec::new()
    }

    /// The region text ([`InteractedElement::region`]) of each element of the last capture
    /// at `indices`, in order (`None` where it is unknown).
    async fn element_regions(&self, indices: &[u64]) -> Vec<Option<String>> {
        vec![None; indices.len()]
    }
}

//! browser-use's actions: the [`Action`] enum the model emits (externally tagged, snake_case,
//! browser-use's parameter names and defaults, with a JSON schema), the [`ActionResult`] it
//! gets back, and their execution on a [`BrowserSession`](crate::BrowserSession)
//! ([`BrowserSession::execute`](crate::BrowserSession::execute)).
//!
//! Invariants: every failure becomes an [`ActionResult`] with `error` set (text the model can
//! act on), never a panic or an `Err`; every CDP call has a timeout (browser-use's event
//! timeouts, [`timeouts`]); element indices resolve through the selector map of the session's
//! last capture only; files are read and written only inside the task
//! [`Workspace`](workspace::Workspace).

mod click;
mod dropdown_upload;
mod element;
mod exec;
mod input;
mod js;
mod keys;
pub mod markdown;
mod navigation;
mod person;
mod read_page;
mod scroll_keys;
pub mod workspace;

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use browserd_views::ActionResult;
pub use keys::{KeyPress, parse_keys};
pub use person::PersonInputError;
pub use workspace::{Workspace, WorkspaceError};

/// browser-use's per-event timeouts (seconds) used by the executor.
pub mod timeouts {
    use std::time::Duration;
    /// Page.navigate itself.
    pub const NAVIGATE_COMMAND: Duration = Duration::from_secs(20);
    /// Load wait after commit: same site.
    pub const LOAD_SAME_DOMAIN: Duration = Duration::from_secs(3);
    /// Load wait after commit: other site.
    pub const LOAD_OTHER_DOMAIN: Duration = Duration::from_secs(8);
    pub const CLICK: Duration = Duration::from_secs(15);
    pub const MOUSE_PRESSED: Duration = Duration::from_secs(3);
    pub const MOUSE_RELEASED: Duration = Duration::from_secs(5);
    pub const TYPE_TEXT: Duration = Duration::from_secs(60);
    pub const SCROLL: Duration = Duration::from_secs(8);
    pub const SCROLL_TO_TEXT: Duration = Duration::from_secs(15);
    pub const SEND_KEYS: Duration = Duration::from_secs(60);
    pub const SCREENSHOT: Duration = Duration::from_secs(15);
    pub const SWITCH_TAB: Duration = Duration::from_secs(10);
    pub const CLOSE_TAB: Duration = Duration::from_secs(10);
    pub const GO_BACK: Duration = Duration::from_secs(15);
    pub const DROPDOWN: Duration = Duration::from_secs(15);
    pub const SELECT_DROPDOWN: Duration = Duration::from_secs(8);
    pub const UPLOAD_FILE: Duration = Duration::from_secs(30);
    pub const PRINT_TO_PDF: Duration = Duration::from_secs(30);
    pub const EVALUATE: Duration = Duration::from_secs(30);
    pub const EXTRACT: Duration = Duration::from_secs(30);
}

fn default_true() -> bool {
    true
}
fn default_engine() -> SearchEngine {
    SearchEngine::Duckduckgo
}
fn default_wait_seconds() -> i64 {
    3
}
fn default_pages() -> f64 {
    1.0
}
fn default_context_chars() -> u32 {
    150
}
fn default_search_max_results() -> u32 {
    25
}
fn default_find_max_results() -> u32 {
    50
}
fn default_scale() -> f64 {
    1.0
}
fn default_paper() -> PaperFormat {
    PaperFormat::Letter
}

/// Search engine of the `search` action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SearchEngine {
    Duckduckgo,
    Google,
    Bing,
}

impl SearchEngine {
    /// The URL browser-use opens for `query`.
    pub fn url(self, query: &str) -> String {
        let q: String = url::form_urlencoded::byte_serialize(query.as_bytes()).collect();
        match self {
            SearchEngine::Duckduckgo => format!("https://duckduckgo.com/?q={q}"),
            SearchEngine::Google => format!("https://www.google.com/search?q={q}&udm=14"),
            SearchEngine::Bing => format!("https://www.bing.com/search?q={q}"),
        }
    }

    fn title(self) -> &'static str {
        match self {
            SearchEngine::Duckduckgo => "Duckduckgo",
            SearchEngine::Google => "Google",
            SearchEngine::Bing => "Bing",
        }
    }
}

/// Paper size of `save_as_pdf`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum PaperFormat {
    Letter,
    Legal,
    A4,
    A3,
    Tabloid,
}

impl PaperFormat {
    /// Width and height in inches.
    pub fn inches(self) -> (f64, f64) {
        match self {
            PaperFormat::Letter => (8.5, 11.0),
            PaperFormat::Legal => (8.5, 14.0),
            PaperFormat::A4 => (8.27, 11.69),
            PaperFormat::A3 => (11.69, 16.54),
            PaperFormat::Tabloid => (11.0, 17.0),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DoneParams {
    pub text: String,
    #[serde(default = "default_true")]
    pub success: bool,
    #[serde(default)]
    pub files_to_display: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SearchParams {
    pub query: String,
    #[serde(default = "default_engine")]
    pub engine: SearchEngine,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NavigateParams {
    pub url: String,
    #[serde(default)]
    pub new_tab: bool,
}

/// browser-use's `NoParamsAction`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NoParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WaitParams {
    #[serde(default = "default_wait_seconds")]
    pub seconds: i64,
}

/// Click by index, or by viewport coordinates (CSS px).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ClickParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub index: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coordinate_x: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coordinate_y: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct InputParams {
    pub index: u32,
    pub text: String,
    #[serde(default = "default_true")]
    pub clear: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UploadFileParams {
    pub index: u32,
    pub path: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TabParams {
    /// The 4-character tab id shown in the page info.
    #[schemars(length(min = 4, max = 4))]
    pub tab_id: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ExtractParams {
    pub query: String,
    #[serde(default)]
    pub extract_links: bool,
    #[serde(default)]
    pub extract_images: bool,
    #[serde(default)]
    pub start_from_char: usize,
    #[serde(default)]
    pub already_collected: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SearchPageParams {
    pub pattern: String,
    #[serde(default)]
    pub regex: bool,
    #[serde(default)]
    pub case_sensitive: bool,
    #[serde(default = "default_context_chars")]
    pub context_chars: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub css_scope: Option<String>,
    #[serde(default = "default_search_max_results")]
    pub max_results: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FindElementsParams {
    pub selector: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attributes: Option<Vec<String>>,
    #[serde(default = "default_find_max_results")]
    pub max_results: u32,
    #[serde(default = "default_true")]
    pub include_text: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ScrollParams {
    #[serde(default = "default_true")]
    pub down: bool,
    #[serde(default = "default_pages")]
    pub pages: f64,
    /// A scroll container's index; 0 or absent scrolls the page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SendKeysParams {
    pub keys: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FindTextParams {
    pub text: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ScreenshotParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_name: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SaveAsPdfParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_name: Option<String>,
    #[serde(default = "default_true")]
    pub print_background: bool,
    #[serde(default)]
    pub landscape: bool,
    #[serde(default = "default_scale")]
    #[schemars(range(min = 0.1, max = 2.0))]
    pub scale: f64,
    #[serde(default = "default_paper")]
    pub paper_format: PaperFormat,
    #[serde(default = "default_true")]
    pub display_header_footer: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header_template: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub footer_template: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct IndexParams {
    pub index: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SelectDropdownParams {
    pub index: u32,
    /// Exact option text or value.
    pub text: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EvaluateParams {
    pub code: String,
}

/// One action as the model emits it: `{"click": {"index": 5}}`. Variant order is browser-use's
/// registration order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Done(DoneParams),
    Search(SearchParams),
    Navigate(NavigateParams),
    GoBack(NoParams),
    Wait(WaitParams),
    Click(ClickParams),
    Input(InputParams),
    UploadFile(UploadFileParams),
    Switch(TabParams),
    Close(TabParams),
    Extract(ExtractParams),
    SearchPage(SearchPageParams),
    FindElements(FindElementsParams),
    Scroll(ScrollParams),
    SendKeys(SendKeysParams),
    FindText(FindTextParams),
    Screenshot(ScreenshotParams),
    SaveAsPdf(SaveAsPdfParams),
    DropdownOptions(IndexParams),
    SelectDropdown(SelectDropdownParams),
    Evaluate(EvaluateParams),
}

impl Action {
    /// The action's name (`click`, `go_back`, …).
    pub fn name(&self) -> &'static str {
        match self {
            Action::Done(_) => "done",
            Action::Search(_) => "search",
            Action::Navigate(_) => "navigate",
            Action::GoBack(_) => "go_back",
            Action::Wait(_) => "wait",
            Action::Click(_) => "click",
            Action::Input(_) => "input",
            Action::UploadFile(_) => "upload_file",
            Action::Switch(_) => "switch",
            Action::Close(_) => "close",
            Action::Extract(_) => "extract",
            Action::SearchPage(_) => "search_page",
            Action::FindElements(_) => "find_elements",
            Action::Scroll(_) => "scroll",
            Action::SendKeys(_) => "send_keys",
            Action::FindText(_) => "find_text",
            Action::Screenshot(_) => "screenshot",
            Action::SaveAsPdf(_) => "save_as_pdf",
            Action::DropdownOptions(_) => "dropdown_options",
            Action::SelectDropdown(_) => "select_dropdown",
            Action::Evaluate(_) => "evaluate",
        }
    }

    /// browser-use's `terminates_sequence`: the page changed, so the rest of a multi-action
    /// step must not run on stale indices.
    pub fn terminates_sequence(&self) -> bool {
        browserd_views::terminates_sequence(self.name())
    }

    /// Whether the action can start work in the page (requests, timers, a navigation, DOM
    /// changes), so that the next capture must wait for the page to settle from it.
    pub fn settles_page(&self) -> bool {
        matches!(
            self,
            Action::Search(_)
                | Action::Navigate(_)
                | Action::GoBack(_)
                | Action::Click(_)
                | Action::Input(_)
                | Action::UploadFile(_)
                | Action::Scroll(_)
                | Action::SendKeys(_)
                | Action::FindText(_)
                | Action::SelectDropdown(_)
                | Action::Evaluate(_)
        )
    }

    /// The element index the action addresses, if any (browser-use's `interacted_element`).
    pub fn index(&self) -> Option<u32> {
        match self {
            Action::Click(p) => p.index,
            Action::Input(p) => Some(p.index),
            Action::UploadFile(p) => Some(p.index),
            Action::Scroll(p) => p.index.filter(|i| *i != 0),
            Action::DropdownOptions(p) => Some(p.index),
            Action::SelectDropdown(p) => Some(p.index),
            _ => None,
        }
    }
}

/// A secret the agent substituted into an action; typed values equal to it are reported by
/// name only.
#[derive(Clone)]
pub struct SensitiveValue {
    pub name: String,
    pub value: String,
}

impl std::fmt::Debug for SensitiveValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SensitiveValue")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// What the executor needs from the agent besides the action.
#[derive(Clone, Debug, Default)]
pub struct ActionContext {
    /// Local files the task may upload or read besides the workspace (browser-use's
    /// `available_file_paths`).
    pub available_file_paths: Vec<PathBuf>,
    /// Secrets that may appear in `input` text.
    pub sensitive_values: Vec<SensitiveValue>,
    /// Size of the screenshot the model saw, if it differs from the viewport (coordinates of a
    /// coordinate click are scaled from it to the session's emulated viewport, which the
    /// screenshot shows whole, scrollbars included).
    pub llm_screenshot_size: Option<(f64, f64)>,
}

/// JSON schema of one action object (`anyOf` over the variants).
pub fn action_schema() -> schemars::Schema {
    schemars::schema_for!(Action)
}

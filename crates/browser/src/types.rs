//! Public value types of a capture: options, page state, elements, tabs.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

pub use crate::dom::{AxInfo, AxValue, Rect, ShadowRootKind};
pub use browserd_views::{PageInfo, PageStats, Screenshot, ScreenshotFormat, TabInfo};

/// Size of a tab's viewport in CSS pixels (device scale factor 1, not mobile), set on every
/// tab of a session with `Emulation.setDeviceMetricsOverride` as browser-use does headless.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Viewport {
    pub width: u32,
    pub height: u32,
}

impl Viewport {
    /// browser-use's headless viewport (its `screen` fallback): 1920×1080.
    pub const BROWSER_USE: Viewport = Viewport {
        width: 1920,
        height: 1080,
    };

    pub const fn new(width: u32, height: u32) -> Self {
        Self { width, height }
    }

    /// Pixel size of a screenshot of this viewport scaled down, keeping its aspect ratio, to
    /// fit within `max` (width, height); never scaled up.
    pub fn screenshot_size(self, max: Option<(u32, u32)>) -> (u32, u32) {
        let full = (self.width, self.height);
        let Some((max_width, max_height)) = max else {
            return full;
        };
        if self.width <= max_width && self.height <= max_height {
            return full;
        }
        let scale = self.screenshot_scale(max_width, max_height);
        let side = |v: u32| ((f64::from(v) * scale).round() as u32).max(1);
        (side(self.width), side(self.height))
    }

    fn screenshot_scale(self, max_width: u32, max_height: u32) -> f64 {
        (f64::from(max_width) / f64::from(self.width.max(1)))
            .min(f64::from(max_height) / f64::from(self.height.max(1)))
            .min(1.0)
    }
}

impl Default for Viewport {
    fn default() -> Self {
        Self::BROWSER_USE
    }
}

impl std::fmt::Display for Viewport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}x{}", self.width, self.height)
    }
}

/// What one capture should produce.
#[derive(Clone, Debug)]
pub struct CaptureOptions {
    /// Take a viewport screenshot in parallel with the DOM work.
    pub screenshot: Option<ScreenshotFormat>,
    /// Scale the screenshot down (aspect ratio kept) to fit within (width, height) pixels.
    /// Chrome renders it scaled (`Page.captureScreenshot` with a `clip` of the visual
    /// viewport and a `scale`): the page is not resized. `None` = the viewport's size.
    pub screenshot_max_size: Option<(u32, u32)>,
    /// Pixels above and below the viewport that still count as visible (browser-use: 1000).
    pub viewport_threshold: f64,
    /// Cap of the serialized text (browser-use: 40 000 characters).
    pub max_text_len: usize,
    /// Descend into cross-origin iframes (their own targets).
    pub cross_origin_iframes: bool,
    /// At most this many documents per target snapshot and cross-origin frames per capture.
    pub max_iframes: usize,
    /// Maximum nesting of cross-origin frames.
    pub max_iframe_depth: usize,
    /// Hide elements fully covered by opaque elements painted above them.
    pub paint_order_filtering: bool,
    /// Draw the indexed elements' boxes and index labels onto the screenshot (browser-use's
    /// `highlight_elements`; see [`crate::highlight`]).
    pub highlight_elements: bool,
}

impl Default for CaptureOptions {
    fn default() -> Self {
        Self {
            screenshot: None,
            screenshot_max_size: None,
            viewport_threshold: 1000.0,
            max_text_len: 40_000,
            cross_origin_iframes: true,
            max_iframes: 100,
            max_iframe_depth: 5,
            paint_order_filtering: true,
            highlight_elements: false,
        }
    }
}

/// One element the model can address by index; everything an action needs to reach it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ElementInfo {
    /// The index shown to the model (the backendNodeId unless remapped on collision).
    pub index: u32,
    pub backend_node_id: i64,
    /// Target the node lives in (a cross-origin iframe has its own target).
    pub target_id: String,
    /// CDP session on the crate's raw connection for that target.
    pub session_id: String,
    /// Frame (document) the node belongs to.
    pub frame_id: Option<String>,
    /// Lower-case tag name.
    pub tag_name: String,
    /// HTML attributes in document order (live `value`/`checked` for inputs; never the
    /// value of password, file or hidden inputs).
    pub attributes: Vec<(String, String)>,
    pub ax_role: Option<String>,
    pub ax_name: Option<String>,
    /// Bounds in CSS px in the coordinates of the node's own document.
    pub bounds: Option<Rect>,
    /// Bounds in CSS px relative to the top-level viewport (iframe offsets and scroll applied).
    pub absolute_bounds: Option<Rect>,
    pub is_scrollable: bool,
    pub is_visible: bool,
    pub is_file_input: bool,
    pub is_select: bool,
    pub in_shadow_root: bool,
    /// Marked `*` (new since the previous capture of this session).
    pub is_new: bool,
    /// Text of the element's descendants, capped at 100 characters.
    pub text: String,
    /// browser-use's XPath within the element's document (`html/body/div[2]/button`).
    pub x_path: String,
    /// A stable identity for finding the element again in another capture, another session
    /// or a changed page: see [`element_hash`].
    pub element_hash: String,
}

/// Attributes that name an element rather than describe its state: the ones the identity
/// hash covers (`class`, `style`, `value`, `checked`, `aria-expanded` … change as a page is
/// used, and backend node ids change with every load).
pub const IDENTITY_ATTRIBUTES: &[&str] = &[
    "id",
    "name",
    "type",
    "role",
    "href",
    "src",
    "alt",
    "title",
    "placeholder",
    "aria-label",
    "for",
    "action",
    "method",
    "data-testid",
    "data-test",
    "data-qa",
    "data-cy",
];

/// An element's identity: 16 hex digits of SHA-256 over the tags of its branch (ancestors and
/// itself, from the top document down), its [`IDENTITY_ATTRIBUTES`] in that order and its
/// accessible name. Siblings inserted before it do not change it; a different element with the
/// same branch, attributes and name has the same identity (the replay then falls back to the
/// XPath).
pub fn element_hash(
    branch: &[&str],
    attributes: &[(String, String)],
    ax_name: Option<&str>,
) -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    hasher.update(branch.join("/").as_bytes());
    hasher.update(b"|");
    for name in IDENTITY_ATTRIBUTES {
        if let Some((_, value)) = attributes.iter().find(|(k, _)| k == name) {
            hasher.update(name.as_bytes());
            hasher.update(b"=");
            hasher.update(value.trim().as_bytes());
            hasher.update(b"\n");
        }
    }
    hasher.update(b"|");
    hasher.update(ax_name.unwrap_or_default().trim().as_bytes());
    hex::encode(&hasher.finalize()[..8])
}

impl ElementInfo {
    /// Value of an attribute.
    pub fn attr(&self, name: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Index → element of one capture.
pub type SelectorMap = BTreeMap<u32, Arc<ElementInfo>>;

/// A tab of the session: its target and what the model sees of it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Tab {
    pub target_id: String,
    /// Last four characters of the target id, as browser-use shows tabs.
    pub tab_id: String,
    pub url: String,
    pub title: String,
}

impl Tab {
    pub(crate) fn new(target_id: String, url: String, title: String) -> Self {
        Self {
            tab_id: short_tab_id(&target_id),
            target_id,
            url,
            title,
        }
    }

    /// The tab as the model sees it.
    pub fn info(&self) -> TabInfo {
        TabInfo {
            tab_id: self.tab_id.clone(),
            url: self.url.clone(),
            title: self.title.clone(),
        }
    }
}

/// browser-use's short tab id: the last four characters of the target id.
pub fn short_tab_id(target_id: &str) -> String {
    let chars: Vec<char> = target_id.chars().collect();
    chars[chars.len().saturating_sub(4)..].iter().collect()
}

/// Where the time of one capture went.
#[derive(Clone, Debug, Default)]
pub struct CaptureTimings {
    pub total: Duration,
    /// Snapshot + listeners + metrics round trips (concurrent).
    pub cdp: Duration,
    pub build: Duration,
    pub accessibility: Duration,
    pub cross_origin_frames: Duration,
    pub serialize: Duration,
    /// Number of `Accessibility.getPartialAXTree` calls.
    pub ax_nodes: usize,
    /// When the click-listener probe finished, from the start of the capture (it runs
    /// concurrently with the snapshot, build and accessibility phases).
    pub listener_probe: Duration,
    /// Drawing the highlights onto the screenshot (decode, draw, encode), when asked.
    pub highlight: Duration,
}

/// What the agent sees of the focused tab.
#[derive(Clone, Debug)]
pub struct PageState {
    /// browser-use's element text: `[Start of page]`/`[End of page]` markers, capped.
    pub llm_text: String,
    /// The serialized tree before markers and cap.
    pub dom_text: String,
    /// True when `dom_text` was longer than the cap.
    pub truncated: bool,
    pub selector_map: SelectorMap,
    /// URL of the focused tab.
    pub url: String,
    /// Title of the focused tab.
    pub title: String,
    /// The context's tabs.
    pub tabs: Vec<TabInfo>,
    /// Short id of the focused tab.
    pub focused_tab: Option<String>,
    pub page_info: PageInfo,
    pub stats: PageStats,
    pub screenshot: Option<Screenshot>,
    pub timings: CaptureTimings,
    /// JavaScript dialogs closed automatically since the last action result or capture
    /// (`[alert] message`), browser-use's `closed_popup_messages`.
    pub closed_popup_messages: Vec<String>,
    /// What went wrong in the browser since the last capture and was repaired (a tab whose
    /// page crashed or used too much memory, replaced), browser-use's `browser_errors`.
    pub browser_errors: Vec<String>,
}

impl PageState {
    /// The note browser-use appends to "Interactive elements" when the text was cut.
    pub fn truncation_note(&self, max_text_len: usize) -> String {
        if self.truncated {
            format!(" (truncated to {max_text_len} characters)")
        } else {
            String::new()
        }
    }
}

/// State of a download of the session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DownloadState {
    InProgress,
    Completed,
    Canceled,
}

/// One file the page downloaded into the task workspace's `downloads/`.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct DownloadInfo {
    pub guid: String,
    pub url: String,
    pub suggested_filename: String,
    /// Final path once completed (a sanitized, unique name in `downloads/`).
    pub path: Option<std::path::PathBuf>,
    pub state: DownloadState,
    pub received_bytes: u64,
    pub total_bytes: u64,
}

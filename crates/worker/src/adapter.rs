//! [`SessionBrowser`]: the agent's `AgentBrowser` over a leased `BrowserSession`.
//!
//! Regions ([`InteractedElement::region`]): the text of the element's largest ancestor that
//! holds no other element of the same tag and name (name ≈ `aria-label` || innerText ||
//! value || title) — its row, card or option —, whitespace collapsed, capped at
//! [`REGION_CHARS`]; computed in the element's own frame by one page function per element
//! ([`REGION_JS`]), each CDP call bounded by [`REGION_LIMIT`]. `describe_element` records it
//! for every element action; `element_regions` computes it for a replay's candidates.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use browserd_agent::{
    ActionSpec, AgentBrowser, BrowserState, FocusInfo, InteractedElement, MarkdownOptions,
    PageMarkdown,
};
use browserd_browser::actions::{ExtractParams, SensitiveValue};
use browserd_browser::{
    Action, ActionContext, BrowserSession, CaptureOptions, DownloadState, ElementInfo,
    ScreenshotFormat, SelectorMap,
};
use browserd_views::{
    AGENT_OWNED_ACTIONS, ActionResult, BrowserFailure, ContentStats, MarkdownChunk, Screenshot,
};
use serde::Deserialize as _;
use serde_json::{Map, Value, json};

use crate::specs::browser_action_specs;

/// Upper bound of one capture (each CDP call inside has its own timeout too).
const CAPTURE_LIMIT: Duration = Duration::from_secs(60);
/// Upper bound of one small lookup (focused tab).
const LOOKUP_LIMIT: Duration = Duration::from_secs(15);

/// Upper bound of each CDP call computing one element's region.
const REGION_LIMIT: Duration = Duration::from_secs(5);
/// Regions computed at once by `element_regions` (their CDP calls overlap).
const REGIONS_IN_FLIGHT: usize = 16;
/// Longest region text, in characters.
pub const REGION_CHARS: usize = 500;
/// The page function computing an element's region (`this` is the element).
pub const REGION_JS: &str = r#"function() {
  const norm = (s) => (s == null ? "" : String(s)).replace(/\s+/g, " ").trim();
  const nameOf = (e) => norm(e.getAttribute && e.getAttribute("aria-label")) || norm(e.innerText)
    || norm(e.value) || norm(e.title);
  const el = this;
  const top = el.ownerDocument && el.ownerDocument.documentElement;
  const name = nameOf(el);
  let region = el;
  for (let node = el.parentElement; node && node !== top; node = node.parentElement) {
    let other = false;
    for (const same of node.getElementsByTagName(el.tagName)) {
      if (same !== el && nameOf(same) === name) { other = true; break; }
    }
    if (other) break;
    region = node;
  }
  return Array.from(norm(region.innerText)).slice(0, 500).join("");
}"#;

/// The largest screenshot the model gets, in pixels: the 1280×800 window its screenshots came
/// from before tabs got browser-use's 1920×1080 viewport, so a step's image costs the model
/// what it did (1920×1080 is sent as 1280×720). Coordinate clicks are scaled back.
pub const LLM_SCREENSHOT_MAX_SIZE: (u32, u32) = (1280, 800);

/// How the adapter captures and what it passes to actions.
#[derive(Clone, Debug)]
pub struct SessionBrowserOptions {
    /// DOM capture settings (text cap, iframes, paint order).
    pub capture: CaptureOptions,
    /// Encoding of the screenshots the agent asks for.
    pub screenshot_format: ScreenshotFormat,
    /// The screenshots the agent gets are scaled down to fit this (width, height);
    /// `None` = the viewport's size.
    pub screenshot_max_size: Option<(u32, u32)>,
    /// Local files `upload_file` may use besides the workspace.
    pub available_file_paths: Vec<PathBuf>,
    /// `(name, value)` of the task's secrets: typed values equal to one are reported by name.
    pub sensitive_values: Vec<(String, String)>,
}

impl Default for SessionBrowserOptions {
    fn default() -> Self {
        Self {
            capture: CaptureOptions::default(),
            screenshot_format: ScreenshotFormat::Jpeg { quality: 80 },
            screenshot_max_size: Some(LLM_SCREENSHOT_MAX_SIZE),
            available_file_paths: Vec::new(),
            sensitive_values: Vec::new(),
        }
    }
}

/// The agent's browser: one task's `BrowserSession`.
pub struct SessionBrowser {
    session: BrowserSession,
    capture: CaptureOptions,
    screenshot_format: ScreenshotFormat,
    screenshot_max_size: Option<(u32, u32)>,
    context: ActionContext,
    specs: Vec<ActionSpec>,
    /// Selector map of the last capture (for the history's interacted elements).
    last_elements: Mutex<SelectorMap>,
}

impl std::fmt::Debug for SessionBrowser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionBrowser")
            .field("context", &self.session.context_id())
            .finish_non_exhaustive()
    }
}

impl SessionBrowser {
    /// Wraps `session`.
    pub fn new(session: BrowserSession, options: SessionBrowserOptions) -> Self {
        let viewport = session.emulated_viewport();
        let shown = viewport.screenshot_size(options.screenshot_max_size);
        let context = ActionContext {
            available_file_paths: options.available_file_paths,
            sensitive_values: options
                .sensitive_values
                .into_iter()
                .filter(|(_, value)| !value.is_empty())
                .map(|(name, value)| SensitiveValue { name, value })
                .collect(),
            // Coordinates the model reads off a scaled screenshot are scaled back.
            llm_screenshot_size: (shown != (viewport.width, viewport.height))
                .then(|| (f64::from(shown.0), f64::from(shown.1))),
        };
        Self {
            session,
            capture: options.capture,
            screenshot_format: options.screenshot_format,
            screenshot_max_size: options.screenshot_max_size,
            context,
            specs: browser_action_specs(),
            last_elements: Mutex::new(SelectorMap::new()),
        }
    }

    /// The wrapped session.
    pub fn session(&self) -> &BrowserSession {
        &self.session
    }

    /// Gives the session back (to release it).
    pub fn into_session(self) -> BrowserSession {
        self.session
    }

    fn remember(&self, map: SelectorMap) {
        *self.last_elements.lock().unwrap_or_else(|e| e.into_inner()) = map;
    }

    /// The element at `index` of the last capture.
    fn element(&self, index: u64) -> Option<std::sync::Arc<ElementInfo>> {
        let index = u32::try_from(index).ok()?;
        let elements = self.last_elements.lock().unwrap_or_else(|e| e.into_inner());
        elements.get(&index).cloned()
    }

    /// The region text of `element` (see the module), `None` when it cannot be computed.
    async fn region(&self, element: &ElementInfo) -> Option<String> {
        let value = self
            .session
            .call_on_element(element, REGION_JS, REGION_LIMIT)
            .await
            .map_err(|e| tracing::debug!(index = element.index, error = %e, "no region"))
            .ok()?;
        value
            .as_str()
            .map(|text| text.chars().take(REGION_CHARS).collect())
    }
}

/// Runs a capture-like browser call bounded by `CAPTURE_LIMIT`, with the agent's error.
async fn within_capture_limit<T>(
    what: &str,
    call: impl std::future::Future<Output = browserd_browser::Result<T>>,
) -> Result<T, BrowserFailure> {
    tokio::time::timeout(CAPTURE_LIMIT, call)
        .await
        .map_err(|_| {
            BrowserFailure::new(format!(
                "{what} timed out after {} s",
                CAPTURE_LIMIT.as_secs()
            ))
        })?
        .map_err(BrowserFailure::from)
}

#[async_trait]
impl AgentBrowser for SessionBrowser {
    async fn capture(&self, include_screenshot: bool) -> Result<BrowserState, BrowserFailure> {
        let mut options = self.capture.clone();
        options.screenshot = include_screenshot.then_some(self.screenshot_format);
        options.screenshot_max_size = self.screenshot_max_size;
        let page =
            within_capture_limit("capturing the page", self.session.capture(&options)).await?;
        let downloaded_files = self
            .session
            .downloads()
            .into_iter()
            .filter(|d| d.state == DownloadState::Completed)
            .filter_map(|d| d.path.map(|p| p.display().to_string()))
            .collect();
        let state = BrowserState {
            url: page.url,
            title: page.title,
            tabs: page.tabs,
            current_tab_id: page.focused_tab,
            page_info: Some(page.page_info),
            page_stats: Some(page.stats),
            llm_text: page.llm_text,
            element_count: page.selector_map.len(),
            screenshot: page.screenshot,
            closed_dialogs: page.closed_popup_messages,
            browser_errors: page.browser_errors,
            downloaded_files,
            error: None,
        };
        self.remember(page.selector_map);
        Ok(state)
    }

    async fn screenshot(&self) -> Result<Option<Screenshot>, BrowserFailure> {
        let shot = within_capture_limit(
            "the screenshot",
            self.session
                .viewport_screenshot(self.screenshot_format, self.screenshot_max_size),
        )
        .await?;
        if !self.capture.highlight_elements {
            return Ok(Some(shot));
        }
        // The history's screenshot of a step whose model got no image: highlighted with the
        // step's capture, taken just before.
        let elements = self
            .last_elements
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let viewport = self.session.emulated_viewport();
        Ok(Some(
            browserd_browser::highlight::highlighted(
                shot,
                elements,
                (viewport.width, viewport.height),
            )
            .await,
        ))
    }

    fn action_specs(&self) -> Vec<ActionSpec> {
        self.specs.clone()
    }

    async fn execute(&self, name: &str, params: &Value) -> Result<ActionResult, BrowserFailure> {
        if AGENT_OWNED_ACTIONS.contains(&name) {
            return Ok(ActionResult::error(format!(
                "Action {name} is handled by the agent, not the browser"
            )));
        }
        if !self.specs.iter().any(|s| s.name == name) {
            return Ok(ActionResult::error(format!("Unknown action {name}")));
        }
        let params = if params.is_null() {
            json!({})
        } else {
            params.clone()
        };
        let action: Action = match serde_json::from_value(json!({ name: params })) {
            Ok(action) => action,
            Err(err) => {
                return Ok(ActionResult::error(format!(
                    "Invalid parameters for {name}: {err}"
                )));
            }
        };
        Ok(self.session.execute(&action, &self.context).await)
    }

    async fn focused_tab(&self) -> Result<FocusInfo, BrowserFailure> {
        let lookup = async {
            let target = self.session.focused_target().await?;
            let tabs = self.session.tabs().await?;
            let url = tabs
                .iter()
                .find(|t| t.target_id == target)
                .map(|t| t.url.clone())
                .unwrap_or_default();
            Ok::<_, browserd_browser::BrowserError>(FocusInfo {
                tab_id: browserd_browser::short_tab_id(&target),
                url,
            })
        };
        tokio::time::timeout(LOOKUP_LIMIT, lookup)
            .await
            .map_err(|_| BrowserFailure::new("looking up the focused tab timed out"))?
            .map_err(BrowserFailure::from)
    }

    async fn extract_markdown(
        &self,
        options: &MarkdownOptions,
    ) -> Result<PageMarkdown, BrowserFailure> {
        let action = Action::Extract(ExtractParams {
            query: options.query.clone(),
            extract_links: options.extract_links,
            extract_images: options.extract_images,
            start_from_char: options.start_from_char,
            already_collected: Vec::new(),
        });
        let result = self.session.execute(&action, &self.context).await;
        if let Some(error) = result.error {
            return Err(BrowserFailure::new(error));
        }
        let unreadable = || BrowserFailure::new("the page content could not be read");
        let extraction = result
            .metadata
            .as_ref()
            .and_then(|m| m.get("extraction"))
            .ok_or_else(unreadable)?;
        let stats = ContentStats::deserialize(&extraction["stats"]).map_err(|_| unreadable())?;
        Ok(PageMarkdown {
            url: extraction["url"].as_str().unwrap_or_default().to_owned(),
            chunk: MarkdownChunk {
                content: extraction["markdown"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                stats,
            },
        })
    }

    async fn describe_element(&self, index: u64) -> Option<InteractedElement> {
        let element = self.element(index)?;
        let mut described = describe(&element);
        described.region = self.region(&element).await;
        Some(described)
    }

    async fn element_regions(&self, indices: &[u64]) -> Vec<Option<String>> {
        let mut regions = Vec::with_capacity(indices.len());
        for chunk in indices.chunks(REGIONS_IN_FLIGHT) {
            let calls = chunk.iter().map(|index| async move {
                match self.element(*index) {
                    Some(element) => self.region(&element).await,
                    None => None,
                }
            });
            regions.extend(join_all(calls.collect()).await);
        }
        regions
    }

    async fn elements(&self) -> Vec<InteractedElement> {
        let elements = self.last_elements.lock().unwrap_or_else(|e| e.into_inner());
        let mut described: Vec<InteractedElement> =
            elements.values().map(|element| describe(element)).collect();
        described.sort_by_key(|e| e.index);
        described
    }
}

/// Runs `futures` concurrently on this task; their outputs in order.
async fn join_all<F: std::future::Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut futures: Vec<std::pin::Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, output) in futures.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(value) => *output = Some(value),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

/// An element of a capture as the history records it (never a `value`: typed text may be a
/// secret), with the identity a replay finds it again by.
fn describe(element: &ElementInfo) -> InteractedElement {
    let attributes: Map<String, Value> = element
        .attributes
        .iter()
        .filter(|(k, _)| k != "value")
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    InteractedElement {
        index: u64::from(element.index),
        node_name: element.tag_name.clone(),
        attributes,
        x_path: Some(element.x_path.clone()),
        ax_name: element.ax_name.clone(),
        element_hash: Some(element.element_hash.clone()),
        bounds: element
            .absolute_bounds
            .as_ref()
            .map(|r| json!({"x": r.x, "y": r.y, "width": r.width, "height": r.height})),
        region: None,
        near: None,
    }
}

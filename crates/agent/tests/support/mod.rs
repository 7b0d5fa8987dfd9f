//! Test doubles: a scripted `ChatModel` that records what it was asked, a fake browser serving a
//! small in-memory site, and a recording event sink.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use browserd_agent::{
    ActionResult, ActionSpec, AgentBrowser, AgentEvent, BrowserFailure, BrowserState, EventSink,
    FocusInfo, InteractedElement, MarkdownChunk, MarkdownOptions, PageInfo, PageMarkdown,
    PageStats, SENT_TO_PAGE, Screenshot, ScreenshotFormat, TabInfo,
};
use browserd_llm::{ChatModel, ChatRequest, ChatResponse, ContentPart, LlmError, Role, TokenUsage};
use serde_json::{Value, json};

/// One scripted reply.
pub enum Reply {
    Json(Value),
    Error(String),
    /// Never answers (until the agent gives up on it).
    Hang,
    /// Computed from the request (e.g. to echo something the model was shown).
    With(Box<dyn Fn(&ChatRequest) -> Value + Send>),
}

/// A `ChatModel` that answers from a queue and records every request.
#[derive(Default)]
pub struct ScriptedModel {
    replies: Mutex<VecDeque<Reply>>,
    pub requests: Mutex<Vec<ChatRequest>>,
    pub request_seen: tokio::sync::Notify,
}

impl ScriptedModel {
    pub fn new(replies: impl IntoIterator<Item = Reply>) -> Arc<Self> {
        Arc::new(Self {
            replies: Mutex::new(replies.into_iter().collect()),
            ..Self::default()
        })
    }

    pub fn json(replies: impl IntoIterator<Item = Value>) -> Arc<Self> {
        Self::new(replies.into_iter().map(Reply::Json))
    }

    pub fn push(&self, reply: Reply) {
        self.replies.lock().unwrap().push_back(reply);
    }

    pub fn requests(&self) -> Vec<ChatRequest> {
        self.requests.lock().unwrap().clone()
    }

    /// Agent-step requests only (not extraction or compaction).
    pub fn step_requests(&self) -> Vec<ChatRequest> {
        self.requests()
            .into_iter()
            .filter(|r| r.output_schema.name == "agent_output")
            .collect()
    }

    pub fn remaining(&self) -> usize {
        self.replies.lock().unwrap().len()
    }
}

#[async_trait]
impl ChatModel for ScriptedModel {
    fn name(&self) -> &str {
        "scripted"
    }

    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        self.requests.lock().unwrap().push(request.clone());
        self.request_seen.notify_waiters();
        let reply = self.replies.lock().unwrap().pop_front();
        match reply {
            Some(Reply::Json(value)) => Ok(ChatResponse {
                value,
                usage: TokenUsage {
                    input_tokens: 100,
                    cached_input_tokens: 0,
                    cache_creation_input_tokens: 0,
                    output_tokens: 10,
                },
                cost_usd: None,
                latency: Duration::ZERO,
                model: "scripted".into(),
                provider_model: "scripted".into(),
                stop_reason: Some("stop".into()),
            }),
            Some(Reply::Error(message)) => Err(LlmError::Status {
                model: "scripted".into(),
                status: 500,
                message,
            }),
            Some(Reply::With(f)) => Ok(ChatResponse {
                value: f(request),
                usage: TokenUsage::default(),
                cost_usd: None,
                latency: Duration::ZERO,
                model: "scripted".into(),
                provider_model: "scripted".into(),
                stop_reason: None,
            }),
            Some(Reply::Hang) => {
                std::future::pending::<()>().await;
                unreachable!()
            }
            None => Err(LlmError::Status {
                model: "scripted".into(),
                status: 500,
                message: "script exhausted".into(),
            }),
        }
    }
}

/// Text of message `i` of a request.
pub fn text_of(request: &ChatRequest, i: usize) -> String {
    request.messages[i]
        .content
        .iter()
        .filter_map(|p| match p {
            ContentPart::Text(t) => Some(t.as_str()),
            ContentPart::Image(_) => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The state message (its first text part) of a step request.
pub fn state_of(request: &ChatRequest) -> String {
    assert_eq!(request.messages[0].role, Role::System);
    assert_eq!(request.messages[1].role, Role::User);
    match &request.messages[1].content[0] {
        ContentPart::Text(t) => t.clone(),
        ContentPart::Image(_) => panic!("the state message starts with text"),
    }
}

/// Nudge messages (after the state message).
pub fn nudges_of(request: &ChatRequest) -> Vec<String> {
    (2..request.messages.len())
        .map(|i| text_of(request, i))
        .collect()
}

/// Action names the request's schema allows.
pub fn allowed_actions(request: &ChatRequest) -> Vec<String> {
    request.output_schema.schema["properties"]["action"]["items"]["anyOf"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["required"][0].as_str().unwrap().to_owned())
        .collect()
}

/// An agent reply with the given actions.
pub fn reply(goal: &str, actions: Value) -> Value {
    json!({
        "thinking": "t",
        "evaluation_previous_goal": "ok",
        "memory": format!("memory: {goal}"),
        "next_goal": goal,
        "action": actions
    })
}

pub fn done(text: &str, success: bool) -> Value {
    reply(
        "finish",
        json!([{"done": {"text": text, "success": success}}]),
    )
}

#[derive(Clone, Debug)]
pub enum Element {
    Link(String),
    Input(String),
    /// Submits the form: goes to `ok` when every (input index, value) matches, else `fail`.
    Submit {
        checks: Vec<(u64, String)>,
        ok: String,
        fail: String,
    },
    /// Opens a new tab on the URL.
    NewTab(String),
    /// A click on it fails; the browser says whether the click had reached the page.
    FailingClick {
        sent_to_page: bool,
    },
    Text,
}

#[derive(Clone, Debug, Default)]
pub struct Page {
    pub title: String,
    pub text: String,
    pub elements: BTreeMap<u64, (String, Element)>,
    pub markdown: String,
    /// Accessible name and region text of elements that have them.
    pub names: BTreeMap<u64, (String, String)>,
}

impl Page {
    pub fn new(title: &str, text: &str) -> Self {
        Self {
            title: title.into(),
            text: text.into(),
            markdown: format!("# {title}\n\n{text}"),
            ..Self::default()
        }
    }

    pub fn el(mut self, index: u64, tag: &str, element: Element) -> Self {
        self.elements.insert(index, (tag.into(), element));
        self
    }

    /// Gives element `index` an accessible name and a region (the row it sits in).
    pub fn named(mut self, index: u64, name: &str, region: &str) -> Self {
        self.names.insert(index, (name.into(), region.into()));
        self
    }
}

#[derive(Default)]
struct FakeState {
    tabs: Vec<(String, Vec<String>)>,
    focused: usize,
    inputs: HashMap<u64, String>,
    executed: Vec<(String, Value)>,
    captures: usize,
    region_lookups: usize,
    screenshots_alone: usize,
    next_tab: u32,
}

/// A browser over an in-memory site.
pub struct FakeBrowser {
    pages: HashMap<String, Page>,
    state: Mutex<FakeState>,
    pub specs: Vec<ActionSpec>,
    pub screenshot: bool,
    /// Size of the fake screenshot.
    pub screenshot_bytes: usize,
}

fn obj(props: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": props, "required": required, "additionalProperties": false})
}

fn spec(name: &str, description: &str, params: Value, terminates: bool) -> ActionSpec {
    ActionSpec {
        name: name.into(),
        description: description.into(),
        params_schema: params,
        terminates_sequence: terminates,
        domains: Vec::new(),
    }
}

/// browser-use's main actions with their parameter names.
pub fn browser_specs() -> Vec<ActionSpec> {
    vec![
        spec(
            "search",
            "",
            obj(
                json!({"query": {"type": "string"}, "engine": {"type": "string"}}),
                &["query"],
            ),
            true,
        ),
        spec(
            "navigate",
            "",
            obj(
                json!({"url": {"type": "string"}, "new_tab": {"type": "boolean"}}),
                &["url"],
            ),
            true,
        ),
        spec("go_back", "Go back", obj(json!({}), &[]), true),
        spec(
            "wait",
            "Wait",
            obj(json!({"seconds": {"type": "integer"}}), &[]),
            false,
        ),
        spec(
            "click",
            "Click element by index.",
            obj(json!({"index": {"type": "integer"}}), &["index"]),
            false,
        ),
        spec(
            "input",
            "Input text into element by index.",
            obj(
                json!({"index": {"type": "integer"}, "text": {"type": "string"}, "clear": {"type": "boolean"}}),
                &["index", "text"],
            ),
            false,
        ),
        spec(
            "scroll",
            "Scroll",
            obj(
                json!({"down": {"type": "boolean"}, "pages": {"type": "number"}, "index": {"type": "integer"}}),
                &[],
            ),
            false,
        ),
        spec(
            "switch",
            "Switch tab",
            obj(json!({"tab_id": {"type": "string"}}), &["tab_id"]),
            true,
        ),
        spec(
            "extract",
            "Extract",
            obj(json!({"query": {"type": "string"}}), &["query"]),
            false,
        ),
        spec("screenshot", "Screenshot", obj(json!({}), &[]), false),
        spec(
            "evaluate",
            "Run JS",
            obj(json!({"code": {"type": "string"}}), &["code"]),
            true,
        ),
    ]
}

impl FakeBrowser {
    pub fn new(pages: impl IntoIterator<Item = (&'static str, Page)>) -> Arc<Self> {
        Arc::new(Self::build(pages))
    }

    pub fn build(pages: impl IntoIterator<Item = (&'static str, Page)>) -> Self {
        Self {
            pages: pages.into_iter().map(|(u, p)| (u.to_owned(), p)).collect(),
            state: Mutex::new(FakeState {
                tabs: vec![("AB12".into(), vec!["about:blank".into()])],
                ..FakeState::default()
            }),
            specs: browser_specs(),
            screenshot: true,
            screenshot_bytes: 512,
        }
    }

    /// The login site used by several tests.
    pub fn login_site() -> Arc<Self> {
        Self::new(login_pages())
    }

    pub fn executed(&self) -> Vec<(String, Value)> {
        self.state.lock().unwrap().executed.clone()
    }

    pub fn executed_names(&self) -> Vec<String> {
        self.executed().into_iter().map(|(n, _)| n).collect()
    }

    pub fn url(&self) -> String {
        let s = self.state.lock().unwrap();
        s.tabs[s.focused].1.last().cloned().unwrap_or_default()
    }

    /// Regions asked for through `element_regions`.
    pub fn region_lookups(&self) -> usize {
        self.state.lock().unwrap().region_lookups
    }

    pub fn captures(&self) -> usize {
        self.state.lock().unwrap().captures
    }

    /// Screenshots taken apart from a capture (history screenshots of image-less steps).
    pub fn screenshots_alone(&self) -> usize {
        self.state.lock().unwrap().screenshots_alone
    }

    fn page(&self, url: &str) -> Page {
        let base = url.split(['?', '#']).next().unwrap_or(url);
        self.pages
            .get(url)
            .or_else(|| self.pages.get(base))
            .cloned()
            .unwrap_or_else(|| Page::new("Not found", "404"))
    }

    fn go(state: &mut FakeState, url: String) {
        let f = state.focused;
        state.tabs[f].1.push(url);
    }
}

pub fn login_pages() -> Vec<(&'static str, Page)> {
    vec![
        (
            "http://app.test/login",
            Page::new("Login", "Please sign in")
                .el(1, "input name=username", Element::Input("username".into()))
                .el(
                    2,
                    "input name=password type=password",
                    Element::Input("password".into()),
                )
                .el(
                    3,
                    "button",
                    Element::Submit {
                        checks: vec![(1, "alice".into()), (2, "s3cret-pw".into())],
                        ok: "http://app.test/welcome".into(),
                        fail: "http://app.test/login?error=1".into(),
                    },
                ),
        ),
        (
            "http://app.test/welcome",
            Page::new("Welcome", "Welcome alice! Your balance is 42."),
        ),
    ]
}

#[async_trait]
impl AgentBrowser for FakeBrowser {
    async fn capture(&self, include_screenshot: bool) -> Result<BrowserState, BrowserFailure> {
        let mut s = self.state.lock().unwrap();
        s.captures += 1;
        let url = s.tabs[s.focused].1.last().cloned().unwrap_or_default();
        let page = self.page(&url);
        let mut llm_text = String::new();
        for (index, (tag, element)) in &page.elements {
            let value = s
                .inputs
                .get(index)
                .map(|v| format!(" value={v}"))
                .unwrap_or_default();
            let value = if tag.contains("password") {
                String::new()
            } else {
                value
            };
            let label = match element {
                Element::Link(u) | Element::NewTab(u) => format!(" href={u}"),
                _ => String::new(),
            };
            llm_text.push_str(&format!("[{index}]<{tag}{label}{value} />\n"));
        }
        llm_text.push_str(&page.text);
        let tabs = s
            .tabs
            .iter()
            .map(|(id, hist)| {
                let u = hist.last().cloned().unwrap_or_default();
                TabInfo {
                    tab_id: id.clone(),
                    title: self.page(&u).title,
                    url: u,
                }
            })
            .collect();
        Ok(BrowserState {
            url: url.clone(),
            title: page.title.clone(),
            tabs,
            current_tab_id: Some(s.tabs[s.focused].0.clone()),
            page_info: Some(PageInfo {
                viewport_width: 1280,
                viewport_height: 720,
                page_width: 1280,
                page_height: 2160,
                scroll_x: 0,
                scroll_y: 0,
                pixels_above: 0,
                pixels_below: 1440,
                pixels_left: 0,
                pixels_right: 0,
            }),
            page_stats: Some(PageStats {
                links: 1,
                interactive_elements: page.elements.len(),
                iframes: 0,
                shadow_open: 0,
                shadow_closed: 0,
                images: 0,
                total_elements: 40,
                ..PageStats::default()
            }),
            llm_text,
            element_count: page.elements.len(),
            screenshot: (include_screenshot && self.screenshot).then(|| Screenshot {
                format: ScreenshotFormat::Png,
                data: vec![0x89; self.screenshot_bytes],
                width: 1280,
                height: 720,
            }),
            closed_dialogs: Vec::new(),
            browser_errors: Vec::new(),
            downloaded_files: Vec::new(),
            error: None,
        })
    }

    async fn screenshot(&self) -> Result<Option<Screenshot>, BrowserFailure> {
        self.state.lock().unwrap().screenshots_alone += 1;
        Ok(self.screenshot.then(|| Screenshot {
            format: ScreenshotFormat::Png,
            data: vec![0x89; self.screenshot_bytes],
            width: 1280,
            height: 720,
        }))
    }

    fn action_specs(&self) -> Vec<ActionSpec> {
        self.specs.clone()
    }

    async fn execute(&self, name: &str, params: &Value) -> Result<ActionResult, BrowserFailure> {
        if name == "hang" {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
        let mut s = self.state.lock().unwrap();
        s.executed.push((name.to_owned(), params.clone()));
        let url = s.tabs[s.focused].1.last().cloned().unwrap_or_default();
        let page = self.page(&url);
        let index = params.get("index").and_then(Value::as_u64);
        let result = match name {
            "navigate" => {
                let target = params["url"].as_str().unwrap_or_default().to_owned();
                if target.contains("unreachable") {
                    return Ok(ActionResult::error(format!(
                        "Navigation failed - site unavailable: {target}"
                    )));
                }
                Self::go(&mut s, target.clone());
                ActionResult::memory(format!("Navigated to {target}"))
            }
            "search" => {
                let q = params["query"].as_str().unwrap_or_default();
                Self::go(&mut s, format!("https://duckduckgo.com/?q={q}"));
                ActionResult::memory(format!("Searched Duckduckgo for '{q}'"))
            }
            "go_back" => {
                let f = s.focused;
                if s.tabs[f].1.len() > 1 {
                    s.tabs[f].1.pop();
                }
                ActionResult::memory("Navigated back")
            }
            "wait" => ActionResult::memory("Waited"),
            "scroll" => ActionResult::memory("Scrolled down"),
            "screenshot" => ActionResult {
                ..ActionResult::memory("Requested screenshot for next observation")
                    .with_meta("include_screenshot", json!(true))
            },
            "switch" => {
                let id = params["tab_id"].as_str().unwrap_or_default();
                match s.tabs.iter().position(|(t, _)| t == id) {
                    Some(i) => {
                        s.focused = i;
                        ActionResult::memory(format!("Switched to tab {id}"))
                    }
                    None => ActionResult::error(format!("No tab with id {id}")),
                }
            }
            "click" | "input" => {
                let Some(index) = index else {
                    return Ok(ActionResult::error("index is required"));
                };
                let Some((_, element)) = page.elements.get(&index).cloned() else {
                    return Ok(ActionResult::error(format!(
                        "Element index {index} not available - page may have changed"
                    )));
                };
                if name == "input" {
                    let text = params["text"].as_str().unwrap_or_default().to_owned();
                    s.inputs.insert(index, text.clone());
                    ActionResult::memory(format!("Typed '{text}'"))
                } else {
                    match element {
                        Element::Link(u) => {
                            Self::go(&mut s, u);
                            ActionResult::memory(format!("Clicked element {index}"))
                        }
                        Element::Submit { checks, ok, fail } => {
                            let good = checks.iter().all(|(i, v)| {
                                s.inputs.get(i).map(String::as_str) == Some(v.as_str())
                            });
                            Self::go(&mut s, if good { ok } else { fail });
                            ActionResult::memory(format!("Clicked element {index}"))
                        }
                        Element::NewTab(u) => {
                            s.next_tab += 1;
                            let id = format!("T{:03}", s.next_tab);
                            s.tabs.push((id.clone(), vec![u]));
                            s.focused = s.tabs.len() - 1;
                            ActionResult::memory(format!(
                                "Clicked element {index}; opened new tab {id}"
                            ))
                        }
                        Element::FailingClick { sent_to_page } => {
                            ActionResult::error(format!("Clicking element {index} failed"))
                                .with_meta(SENT_TO_PAGE, json!(sent_to_page))
                        }
                        _ => ActionResult::memory(format!("Clicked element {index}")),
                    }
                }
            }
            "fail" => return Err(BrowserFailure::new("synthetic failure")),
            "crash" => return Err(BrowserFailure::fatal("browser process exited")),
            other => ActionResult::error(format!("unknown action {other}")),
        };
        Ok(result)
    }

    async fn focused_tab(&self) -> Result<FocusInfo, BrowserFailure> {
        let s = self.state.lock().unwrap();
        Ok(FocusInfo {
            tab_id: s.tabs[s.focused].0.clone(),
            url: s.tabs[s.focused].1.last().cloned().unwrap_or_default(),
        })
    }

    async fn extract_markdown(
        &self,
        options: &MarkdownOptions,
    ) -> Result<PageMarkdown, BrowserFailure> {
        let url = self.url();
        let markdown = self.page(&url).markdown;
        let chunk = MarkdownChunk::cut(&markdown, options.start_from_char, markdown.len())
            .map_err(BrowserFailure::new)?;
        Ok(PageMarkdown { url, chunk })
    }

    async fn describe_element(&self, index: u64) -> Option<InteractedElement> {
        let url = self.url();
        let page = self.page(&url);
        page.elements.get(&index).map(|(tag, _)| {
            let mut element = fake_element(&url, index, tag, &page);
            element.region = page.names.get(&index).map(|(_, r)| r.clone());
            element
        })
    }

    async fn elements(&self) -> Vec<InteractedElement> {
        let url = self.url();
        let page = self.page(&url);
        page.elements
            .iter()
            .map(|(index, (tag, _))| fake_element(&url, *index, tag, &page))
            .collect()
    }

    async fn element_regions(&self, indices: &[u64]) -> Vec<Option<String>> {
        let mut s = self.state.lock().unwrap();
        s.region_lookups += indices.len();
        let url = s.tabs[s.focused].1.last().cloned().unwrap_or_default();
        drop(s);
        let page = self.page(&url);
        indices
            .iter()
            .map(|i| page.names.get(i).map(|(_, r)| r.clone()))
            .collect()
    }
}

/// An element as the fake browser describes it: its identity is its page and index.
fn fake_element(url: &str, index: u64, tag: &str, page: &Page) -> InteractedElement {
    InteractedElement {
        ax_name: page.names.get(&index).map(|(n, _)| n.clone()),
        index,
        node_name: tag
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_uppercase(),
        element_hash: Some(format!("{url}#{index}")),
        ..InteractedElement::default()
    }
}

/// Records every event; screenshots get a reference `shot-<step>`.
#[derive(Default)]
pub struct RecordingSink {
    pub events: Mutex<Vec<AgentEvent>>,
    pub notify: tokio::sync::Notify,
}

impl RecordingSink {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub fn events(&self) -> Vec<AgentEvent> {
        self.events.lock().unwrap().clone()
    }

    pub fn json(&self) -> String {
        serde_json::to_string(&self.events()).unwrap()
    }
}

#[async_trait]
impl EventSink for RecordingSink {
    async fn emit(&self, event: AgentEvent) {
        self.events.lock().unwrap().push(event);
        self.notify.notify_waiters();
    }

    async fn store_screenshot(&self, step: u32, _screenshot: &Screenshot) -> Option<String> {
        Some(format!("shot-{step}"))
    }
}

//! The widget corpus (issue 29): pages built from real component libraries (npm packages pinned
//! in `tests/widgets/package-lock.json`, bundled by `scripts/widgets`; Gradio from PyPI, pinned in
//! `tests/python/gradio/requirements.txt`), the page server that records what each page submits,
//! and one scripted model ("brain") per scenario that chooses elements by their text. Used by
//! `tests/widgets.rs` (browserd) and `benches/widgets_fidelity.rs` (browserd vs Python
//! browser-use on the same pages and brains).

use std::{
    collections::HashMap,
    net::SocketAddr,
    path::PathBuf,
    sync::{Arc, Mutex, OnceLock},
    time::Duration,
};

use axum::{
    Json, Router,
    extract::{
        Path, Query, State,
        ws::{Message as WsMessage, WebSocket, WebSocketUpgrade},
    },
    http::{StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use regex::Regex;
use serde_json::{Value, json};

use crate::{Brain, MockModel, browserd_bin, done_reply, index_of, python_venv, reply, repo_root};

/// The bundle's directory (`scripts/widgets` installs and bundles once; later calls find it).
pub fn dist() -> &'static PathBuf {
    static DIST: OnceLock<PathBuf> = OnceLock::new();
    DIST.get_or_init(|| {
        let output = std::process::Command::new(repo_root().join("scripts/widgets"))
            .stderr(std::process::Stdio::inherit())
            .output()
            .expect("run scripts/widgets");
        assert!(output.status.success(), "scripts/widgets failed");
        PathBuf::from(String::from_utf8(output.stdout).unwrap().trim())
    })
}

// ---------------------------------------------------------------- the page server

/// What the pages sent: widget name → submitted JSON bodies, in order.
#[derive(Clone, Default)]
pub struct Submitted(Arc<Mutex<HashMap<String, Vec<Value>>>>);

impl Submitted {
    pub fn of(&self, widget: &str) -> Vec<Value> {
        self.0
            .lock()
            .unwrap()
            .get(widget)
            .cloned()
            .unwrap_or_default()
    }
}

/// Serves `/pages/{name}` (tests/widgets/pages), `/dist/…` (the bundle), `POST
/// /api/submit/{widget}` (recorded), `/api/feed?page=N` (five posts a page) and the Quasar
/// apps' WebSocket `/ws/{widget}` (see [`app_socket`]).
pub async fn start_server() -> (SocketAddr, Submitted) {
    let submitted = Submitted::default();
    let addr = serve(submitted.clone()).await;
    (addr, submitted)
}

/// [`start_server`] on two ports of 127.0.0.1 sharing one record: two origins of one site (and
/// `localhost:<port>` is another site), for pages that frame another origin's app.
pub async fn start_server_pair() -> (SocketAddr, SocketAddr, Submitted) {
    let submitted = Submitted::default();
    let first = serve(submitted.clone()).await;
    let second = serve(submitted.clone()).await;
    (first, second, submitted)
}

async fn serve(submitted: Submitted) -> SocketAddr {
    let app = Router::new()
        .route("/pages/{name}", get(page))
        .route("/dist/{*path}", get(bundle))
        .route("/api/submit/{widget}", post(submit))
        .route("/api/feed", get(feed))
        .route("/ws/{widget}", get(app_socket))
        .with_state(submitted);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// The server side of the Quasar apps (`tests/widgets/src/quasar.js`), which own no state: each
/// command is recorded under the widget, then answered after the server's "work" —
/// `{"op":"toggle","field":f}` flips `f` and sends every field's state 300 ms later;
/// `{"op":"place"}` records the order with the fields' state; `{"op":"archive","ids":[…]}` answers
/// `{"archived": n}` 400 ms later; `{"op":"book","room":r}` answers `{"booked": r}`.
async fn app_socket(
    upgrade: WebSocketUpgrade,
    State(submitted): State<Submitted>,
    Path(widget): Path<String>,
) -> Response {
    upgrade.on_upgrade(move |mut ws: WebSocket| async move {
        let mut fields = serde_json::Map::new();
        for field in ["gift", "cancelled"] {
            fields.insert(field.into(), Value::Bool(false));
        }
        while let Some(Ok(message)) = ws.recv().await {
            let WsMessage::Text(text) = message else {
                continue;
            };
            let Ok(command) = serde_json::from_str::<Value>(text.as_str()) else {
                continue;
            };
            let record = |value: Value| {
                submitted
                    .0
                    .lock()
                    .unwrap()
                    .entry(widget.clone())
                    .or_default()
                    .push(value);
            };
            let answer = match command["op"].as_str() {
                Some("toggle") => {
                    let field = command["field"].as_str().unwrap_or_default().to_owned();
                    record(json!({ "toggle": field }));
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    let on = fields.get(&field).and_then(Value::as_bool).unwrap_or(false);
                    fields.insert(field, Value::Bool(!on));
                    json!({ "state": fields })
                }
                Some("place") => {
                    record(json!({ "order": fields }));
                    let gift = if fields["gift"] == Value::Bool(true) {
                        "with gift wrap"
                    } else {
                        "without gift wrap"
                    };
                    json!({ "placed": gift })
                }
                Some("archive") => {
                    record(json!({ "archive": command["ids"] }));
                    tokio::time::sleep(Duration::from_millis(400)).await;
                    json!({ "archived": command["ids"].as_array().map_or(0, Vec::len) })
                }
                Some("book") => {
                    record(json!({ "book": command["room"] }));
                    json!({ "booked": command["room"] })
                }
                _ => continue,
            };
            if ws
                .send(WsMessage::Text(answer.to_string().into()))
                .await
                .is_err()
            {
                return;
            }
        }
    })
}

fn file_response(path: &std::path::Path) -> Response {
    let Ok(body) = std::fs::read(path) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let kind = match path.extension().and_then(|e| e.to_str()) {
        Some("html") => "text/html; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("woff2") => "font/woff2",
        _ => "application/octet-stream",
    };
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}

async fn page(Path(name): Path<String>) -> Response {
    if name.contains("..") {
        return StatusCode::NOT_FOUND.into_response();
    }
    file_response(&repo_root().join("tests/widgets/pages").join(name))
}

async fn bundle(Path(path): Path<String>) -> Response {
    if path.contains("..") {
        return StatusCode::NOT_FOUND.into_response();
    }
    file_response(&dist().join(path))
}

/// Records the body and answers `{"saved": <its values, comma-separated>}`.
async fn submit(
    State(submitted): State<Submitted>,
    Path(widget): Path<String>,
    Json(body): Json<Value>,
) -> Json<Value> {
    let saved = body
        .as_object()
        .map(|o| {
            o.values()
                .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default();
    submitted
        .0
        .lock()
        .unwrap()
        .entry(widget)
        .or_default()
        .push(body);
    Json(json!({ "saved": saved }))
}

#[derive(serde::Deserialize)]
struct FeedQuery {
    page: u32,
}

async fn feed(Query(q): Query<FeedQuery>) -> Json<Value> {
    let posts: Vec<Value> = (1..=5)
        .map(|n| {
            let id = q.page * 5 + n;
            json!({"id": id, "title": format!("Post {id}")})
        })
        .collect();
    Json(Value::Array(posts))
}

// ---------------------------------------------------------------- running browserd

/// What a run left: the pages the model was shown and the history.
pub struct Outcome {
    pub pages: Vec<String>,
    pub history: Value,
    pub stderr: String,
    /// Whether `browserd run` exited 0.
    pub exited_ok: bool,
}

impl Outcome {
    pub fn steps(&self) -> usize {
        self.history["history"].as_array().map_or(0, Vec::len)
    }

    /// The last page shown and the run's log, for a failing assertion.
    pub fn explain(&self) -> String {
        if std::env::var_os("WIDGETS_ALL_PAGES").is_some() {
            return format!(
                "{} steps; pages shown:\n{}",
                self.steps(),
                self.pages.join("\n-----\n")
            );
        }
        format!(
            "{} steps; last page shown:\n{}\nstderr:\n{}",
            self.steps(),
            self.pages.last().map_or("(none)", String::as_str),
            self.stderr
        )
    }
}

/// Runs `browserd run task` from `url` with `brain` (no vision) and at most `max_steps` steps.
pub async fn run(task: &str, url: &str, brain: Brain, max_steps: u32) -> Outcome {
    let pages = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = pages.clone();
    let recording: Brain = Arc::new(move |page: &str| {
        seen.lock().unwrap().push(page.to_owned());
        brain(page)
    });
    let model = MockModel::start(recording, Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let history_path = dir.path().join("history.json");
    let output = tokio::process::Command::new(browserd_bin())
        .args(["run", task, "--allow-loopback", "--no-vision"])
        .args(["--max-steps", &max_steps.to_string()])
        .arg("--start-url")
        .arg(url)
        .arg("--history-out")
        .arg(&history_path)
        .arg("--workspace")
        .arg(dir.path().join("workspace"))
        .env("BROWSERD_LLM_DEFAULT_MODEL", "mock")
        .env("BROWSERD_LLM_MOCK_PROVIDER", "openai")
        .env(
            "BROWSERD_LLM_MOCK_BASE_URL",
            format!("http://{}/v1", model.addr),
        )
        .env("BROWSERD_LLM_MOCK_MODEL", "mock-model")
        .env("BROWSERD_LLM_MOCK_MAX_RETRIES", "0")
        .env("RUST_LOG", "warn")
        .env_remove("BROWSERD_CONFIG")
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(180), output)
        .await
        .expect("browserd run took longer than 3 minutes")
        .expect("spawn browserd");
    let history = std::fs::read(&history_path)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or(Value::Null);
    let outcome = Outcome {
        pages: pages.lock().unwrap().clone(),
        history,
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        exited_ok: output.status.success(),
    };
    eprintln!("{task}: {} steps", outcome.steps());
    outcome
}

// ---------------------------------------------------------------- reading the page text

/// The `[index]<tag …>` line (with the text lines under it, up to the next element) of the first
/// element with `tag` that comes after the first match of the regex `anchor` (a label's text).
pub fn element_after<'a>(page: &'a str, anchor: &str, tag: &str) -> Option<(u64, &'a str)> {
    let start = Regex::new(anchor).unwrap().find(page)?.end();
    let re = Regex::new(&format!(r"\[(\d+)\]<{tag}\b[^\n]*(\n[^\[\n]*)*")).unwrap();
    let found = re.find(&page[start..])?;
    let index = Regex::new(r"\[(\d+)\]").unwrap().captures(found.as_str())?[1]
        .parse()
        .ok()?;
    Some((index, found.as_str()))
}

/// Index of the first element with `tag` (a regex) whose text — every text line under it, at
/// any depth, joined — is `text`, whitespace ignored (a row's "Open invoice" and "150" are two
/// text nodes; a filtered option's "Ru" and "st" too).
pub fn element_with_text(page: &str, tag: &str, text: &str) -> Option<u64> {
    let head = Regex::new(&format!(r"^(\t*)[^\[\t]*\[(\d+)\]<({tag})\b")).unwrap();
    let squash = |s: &str| s.chars().filter(|c| !c.is_whitespace()).collect::<String>();
    let wanted = squash(text);
    let lines: Vec<&str> = page.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let Some(c) = head.captures(line) else {
            continue;
        };
        let depth = c[1].len();
        let mut inner = String::new();
        for next in &lines[i + 1..] {
            let indent = next.len() - next.trim_start_matches('\t').len();
            if indent <= depth {
                break;
            }
            let t = next.trim();
            if t.contains('<') || t == "Open Shadow" || t == "Shadow End" {
                continue;
            }
            inner.push_str(t);
        }
        if squash(&inner) == wanted {
            return c[2].parse().ok();
        }
    }
    None
}

fn click(goal: &str, index: u64) -> Value {
    reply(goal, json!([{"click": {"index": index}}]))
}

fn input(goal: &str, index: u64, text: &str) -> Value {
    reply(goal, json!([{"input": {"index": index, "text": text}}]))
}

fn lost(page: &str) -> Value {
    done_reply(&format!("lost on:\n{page}"), false)
}

// ---------------------------------------------------------------- scenarios

/// One scenario of the corpus: a page, a task, the brain, and what the app must have received.
pub struct Scenario {
    /// The scenario's name (unique).
    pub name: &'static str,
    /// The page (`tests/widgets/pages/{page}.html`) and the key its submissions are recorded by.
    pub page: &'static str,
    /// Whether the page is shown inside an iframe of another origin (`framehost.html`).
    pub framed: Option<Framed>,
    pub task: &'static str,
    pub max_steps: u32,
    pub brain: fn() -> Brain,
    /// The submissions the page server must hold at the end, in order, and no other.
    pub expected: fn() -> Vec<Value>,
}

/// How a framed scenario's app is embedded.
#[derive(Clone, Copy, Debug)]
pub enum Framed {
    /// Another origin of the same site (another port of 127.0.0.1): the frame shares the page's
    /// renderer and CDP session.
    SameSite,
    /// Another site (`localhost`): an out-of-process frame with its own target.
    CrossSite,
}

impl Scenario {
    /// The start URL on the servers of [`start_server_pair`] (`first` serves the page, `second`
    /// a framed app).
    pub fn url(&self, first: SocketAddr, second: SocketAddr) -> String {
        let page = format!("/pages/{}.html", self.page);
        match self.framed {
            None => format!("http://{first}{page}"),
            Some(Framed::SameSite) => {
                format!("http://{first}/pages/framehost.html?src=http://{second}{page}")
            }
            Some(Framed::CrossSite) => format!(
                "http://{first}/pages/framehost.html?src=http://localhost:{}{page}",
                second.port()
            ),
        }
    }
}

/// Every npm-bundled scenario.
pub fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "mui",
            page: "mui",
            framed: None,
            task: "Order 37.5 kg with express shipping to Portugal for Ada Lovelace",
            max_steps: 15,
            brain: mui_brain,
            expected: || {
                vec![
                    json!({"name": "Ada Lovelace", "quantity": "37.5", "shipping": "express", "country": "Portugal"}),
                ]
            },
        },
        Scenario {
            name: "shoelace",
            page: "shoelace",
            framed: None,
            task: "Subscribe ada@example.com to the Pro plan, accepting the terms",
            max_steps: 12,
            brain: shoelace_brain,
            expected: || vec![json!({"email": "ada@example.com", "plan": "pro", "terms": true})],
        },
        Scenario {
            name: "flatpickr",
            page: "flatpickr",
            framed: None,
            task: "Book a trip departing on 24 March 2027",
            max_steps: 8,
            brain: flatpickr_brain,
            expected: || vec![json!({"departure": "2027-03-24"})],
        },
        Scenario {
            name: "tomselect",
            page: "tomselect",
            framed: None,
            task: "Set the favourite language to Rust",
            max_steps: 8,
            brain: tom_select_brain,
            expected: || vec![json!({"language": "rust"})],
        },
        Scenario {
            name: "quill",
            page: "quill",
            framed: None,
            task: "Write the note 'Decisions: ship on Friday' and save it",
            max_steps: 8,
            brain: quill_brain,
            expected: || vec![json!({"text": QUILL_NOTE})],
        },
        Scenario {
            name: "virtual",
            page: "virtual",
            framed: None,
            task: "Open invoice 150",
            max_steps: 15,
            brain: virtual_list_brain,
            expected: || vec![json!({"invoice": 150})],
        },
        Scenario {
            name: "feed",
            page: "feed",
            framed: None,
            task: "Like post 23 of the feed",
            max_steps: 20,
            brain: feed_brain,
            expected: || vec![json!({"post": 23})],
        },
        Scenario {
            name: "quasar-order",
            page: "quasar-order",
            framed: None,
            task: "Show the cancelled orders, then place the order with gift wrap",
            max_steps: 8,
            brain: quasar_order_brain,
            // One toggle each: a click whose answer comes from the server later is not repeated.
            expected: || {
                vec![
                    json!({"toggle": "cancelled"}),
                    json!({"toggle": "gift"}),
                    json!({"order": {"gift": true, "cancelled": true}}),
                ]
            },
        },
        Scenario {
            name: "quasar-shipments-same-site",
            page: "quasar-shipments",
            framed: Some(Framed::SameSite),
            task: "Archive shipment SHP-2",
            max_steps: 8,
            brain: quasar_shipments_brain,
            expected: || vec![json!({"archive": ["SHP-2"]})],
        },
        Scenario {
            name: "quasar-shipments-cross-site",
            page: "quasar-shipments",
            framed: Some(Framed::CrossSite),
            task: "Archive shipment SHP-2",
            max_steps: 8,
            brain: quasar_shipments_brain,
            expected: || vec![json!({"archive": ["SHP-2"]})],
        },
        Scenario {
            name: "quasar-availability",
            page: "quasar-availability",
            framed: None,
            task: "Book the sea-view room if it is available",
            max_steps: 8,
            brain: quasar_availability_brain,
            expected: || vec![json!({"book": "sea-view"})],
        },
    ]
}

/// The `[index]<tag …>` line of the element with `tag` whose line says `role=ROLE` and whose text
/// is `text` (Quasar's QCheckbox and QToggle are `div`s with a role and the state in
/// `aria-checked`), and whether it is checked.
fn role_with_text(page: &str, role: &str, text: &str) -> Option<(u64, bool)> {
    let index = element_with_text(page, &format!("div[^\n]*role={role}"), text)
        .or_else(|| element_with_text(page, "div", text))?;
    let line = page.lines().find(|l| l.contains(&format!("[{index}]<")))?;
    Some((index, checked(line)))
}

/// Whether an element line shows the checked state.
fn checked(line: &str) -> bool {
    line.contains("checked=true") || line.contains("aria-checked=true")
}

/// Vue + Quasar, the state on the server: the toggle, then the box (each shows its new state
/// only when the server answers, 300 ms after the click), then "Place order".
pub fn quasar_order_brain() -> Brain {
    Arc::new(|page: &str| {
        if page.contains("Order placed:") {
            return done_reply("The order is placed with gift wrap", true);
        }
        let Some((toggle, shown)) = role_with_text(page, "switch", "Show cancelled orders") else {
            return lost(page);
        };
        if !shown || !page.contains("Order 1001 (cancelled)") {
            return click("show the cancelled orders", toggle);
        }
        let Some((gift, wrapped)) = role_with_text(page, "checkbox", "Gift wrap") else {
            return lost(page);
        };
        if !wrapped {
            return click("add gift wrap", gift);
        }
        match element_with_text(page, "button", "Place order") {
            Some(i) => click("place the order", i),
            None => lost(page),
        }
    })
}

/// The last `role=checkbox` element before the first match of `anchor` (a table row's box comes
/// before its text), and whether it is checked.
fn checkbox_before(page: &str, anchor: &str) -> Option<(u64, bool)> {
    let at = page.find(anchor)?;
    let re = Regex::new(r"\[(\d+)\]<[a-z]+\b[^\n]*role=checkbox[^\n]*").unwrap();
    let found = re.captures_iter(&page[..at]).last()?;
    Some((found[1].parse().ok()?, checked(&found[0])))
}

/// A Quasar table (row selection boxes) in another origin's iframe: tick SHP-2's box, press
/// "Archive selected", read the answer the server sends 400 ms later. A capture that showed the
/// box ticked but not the answer would make the brain press again, as a model would.
pub fn quasar_shipments_brain() -> Brain {
    Arc::new(|page: &str| {
        if page.contains("Archived 1 shipment(s)") {
            return done_reply("Archived SHP-2", true);
        }
        let Some((row, ticked)) = checkbox_before(page, "SHP-2") else {
            return lost(page);
        };
        if !ticked {
            return click("select shipment SHP-2", row);
        }
        match element_with_text(page, "button", "Archive selected") {
            Some(i) => click("archive the selected shipment", i),
            None => lost(page),
        }
    })
}

/// "Checking availability…" for 2.5 s: the brain waits 3 s while it shows, then books.
pub fn quasar_availability_brain() -> Brain {
    Arc::new(|page: &str| {
        if page.contains("Booked:") {
            return done_reply("Booked the sea-view room", true);
        }
        if let Some(i) = element_with_text(page, "button", "Book sea-view room") {
            return click("book the room", i);
        }
        if page.contains("Checking availability") {
            return reply(
                "wait for the availability",
                json!([{"wait": {"seconds": 3}}]),
            );
        }
        lost(page)
    })
}

/// React 19 + MUI: a controlled text field, a controlled number field holding `1` (typed into,
/// it must become 37.5, not 137.5), a Select whose menu opens in a portal, an Autocomplete
/// filtered by typing, and a confirmation Dialog.
pub fn mui_brain() -> Brain {
    Arc::new(|page: &str| {
        if page.contains("Order placed:") {
            return done_reply("The order is placed", true);
        }
        if let Some(i) = index_of(page, "button", r"/>\s*Place order") {
            return click("place the order", i);
        }
        let Some((name, name_line)) = element_after(page, "Full name", "input") else {
            return lost(page);
        };
        if !name_line.contains("value=Ada Lovelace") {
            return input("enter the name", name, "Ada Lovelace");
        }
        let Some((quantity, quantity_line)) = element_after(page, r"Quantity \(kg\)", "input")
        else {
            return lost(page);
        };
        if !quantity_line.contains("value=37.5") {
            return input("enter the quantity", quantity, "37.5");
        }
        if let Some(i) = index_of(page, "li", r"/>\s*Express shipping") {
            return click("choose express shipping", i);
        }
        // The Select's combobox shows the chosen option's text.
        if index_of(page, "div", r"role=combobox[^\n]*/>\s*Express shipping").is_none() {
            return match index_of(page, "div", r"role=combobox[^\n]*/>\s*\w+ shipping") {
                Some(i) => click("open the shipping menu", i),
                None => lost(page),
            };
        }
        if let Some(i) = index_of(page, "li", r"/>\s*Portugal") {
            return click("choose Portugal", i);
        }
        let Some((country, country_line)) = element_after(page, "Country", "input") else {
            return lost(page);
        };
        if !country_line.contains("value=Portugal") {
            return input("search the country", country, "Portu");
        }
        match index_of(page, "button", r"/>\s*Review order") {
            Some(i) => click("review the order", i),
            None => lost(page),
        }
    })
}

/// Shoelace web components: the fields are native inputs inside shadow roots, the select a
/// listbox of `sl-option`s that opens on click, the checkbox and the button hosts whose labels
/// are slotted light-DOM text. The checkbox shows no checked state in the page text (Shoelace
/// keeps it in a property), so the brain remembers that it ticked it.
pub fn shoelace_brain() -> Brain {
    let ticked = Arc::new(Mutex::new(false));
    Arc::new(move |page: &str| {
        if page.contains("Saved:") {
            return done_reply("Subscribed", true);
        }
        let Some((email, email_line)) = element_after(page, "Email address", "input") else {
            return lost(page);
        };
        if !email_line.contains("value=ada@example.com") {
            return input("enter the email", email, "ada@example.com");
        }
        if let Some(i) = element_with_text(page, "sl-option", "Pro plan") {
            return click("choose the Pro plan", i);
        }
        if !page.contains("value=Pro plan") {
            return match element_after(page, "(?m)^\\s*Plan$", "input") {
                Some((i, _)) => click("open the plan menu", i),
                None => lost(page),
            };
        }
        if !*ticked.lock().unwrap() {
            // browserd prints the slotted label inside the checkbox's shadow `<label>`,
            // browser-use before it (under the host): either way, that label.
            let label = element_with_text(page, "label", "I accept the terms")
                .or_else(|| element_after(page, "I accept the terms", "label").map(|(i, _)| i));
            return match label {
                Some(i) => {
                    *ticked.lock().unwrap() = true;
                    click("accept the terms", i)
                }
                None => lost(page),
            };
        }
        match element_with_text(page, "sl-button", "Subscribe") {
            Some(i) => click("subscribe", i),
            None => lost(page),
        }
    })
}

/// Flatpickr: a readonly input that opens a calendar in an overlay; the day is a `span` named
/// by its `aria-label`.
pub fn flatpickr_brain() -> Brain {
    Arc::new(|page: &str| {
        if page.contains("Booked:") {
            return done_reply("Booked", true);
        }
        if page.contains("Departure: 2027-03-24") {
            return match index_of(page, "button", r"/>\s*Book the trip") {
                Some(i) => click("book the trip", i),
                None => lost(page),
            };
        }
        if let Some(i) = index_of(page, "span", r"aria-label=March 24, 2027") {
            return click("pick March 24", i);
        }
        match element_after(page, "Departure date", "input") {
            Some((i, _)) => click("open the calendar", i),
            None => lost(page),
        }
    })
}

/// Tom Select: the native select is hidden behind a searchable control; options exist only
/// in its dropdown, filtered by what is typed. Once "Rust" shows as the chosen item, save.
pub fn tom_select_brain() -> Brain {
    Arc::new(|page: &str| {
        if page.contains("Saved:") {
            return done_reply("Saved", true);
        }
        if let Some(i) =
            element_with_text(page, "div", "Rust").filter(|_| page.contains("role=option"))
        {
            return click("choose Rust", i);
        }
        if Regex::new(r"(?m)^\s*Rust$").unwrap().is_match(page) {
            return match index_of(page, "button", r"/>\s*Save profile") {
                Some(i) => click("save the profile", i),
                None => lost(page),
            };
        }
        match element_after(page, "Favourite language", "input") {
            Some((i, _)) => input("search the language", i, "Ru"),
            None => lost(page),
        }
    })
}

const QUILL_NOTE: &str = "Decisions: ship on Friday";

/// Quill: a contenteditable editor with its own document model (typing must go through the
/// editor, not a value assignment).
pub fn quill_brain() -> Brain {
    Arc::new(|page: &str| {
        if page.contains("Saved:") {
            return done_reply("Saved", true);
        }
        if page.contains(QUILL_NOTE) {
            return match index_of(page, "button", r"/>\s*Save note") {
                Some(i) => click("save the note", i),
                None => lost(page),
            };
        }
        match index_of(page, "div", r"contenteditable") {
            Some(i) => input("write the note", i, QUILL_NOTE),
            None => lost(page),
        }
    })
}

/// react-window: 500 rows of which only those in view exist; the agent scrolls the list until
/// invoice 150's row is rendered.
pub fn virtual_list_brain() -> Brain {
    Arc::new(|page: &str| {
        if page.contains("Opened:") {
            return done_reply("Opened", true);
        }
        if let Some(i) = element_with_text(page, "button", "Open invoice 150") {
            return click("open invoice 150", i);
        }
        // The list itself has no index (a scroll container with interactive rows, as
        // browser-use prints it): scroll from its last row, which scrolls the row's container,
        // by as many list heights (ten rows) as invoice 150 is away.
        let rows: Vec<(u64, u32)> = Regex::new(r"\[(\d+)\]<button />\s*Open invoice\s+(\d+)")
            .unwrap()
            .captures_iter(page)
            .filter_map(|c| Some((c[1].parse().ok()?, c[2].parse().ok()?)))
            .collect();
        let (Some(&(last, highest)), Some(lowest)) = (rows.last(), rows.iter().map(|r| r.1).min())
        else {
            return lost(page);
        };
        let (down, rows_away) = if highest < 150 {
            (true, 150 - highest)
        } else {
            (false, lowest.saturating_sub(150))
        };
        reply(
            "scroll the invoice list",
            json!([{"scroll": {"down": down, "pages": f64::from(rows_away) / 10.0 + 0.5, "index": last}}]),
        )
    })
}

/// An IntersectionObserver feed: each scroll to its end loads five more posts.
pub fn feed_brain() -> Brain {
    Arc::new(|page: &str| {
        if page.contains("Liked:") {
            return done_reply("Liked", true);
        }
        if let Some(i) = element_with_text(page, "button", "Like Post 23") {
            return click("like post 23", i);
        }
        reply(
            "scroll for more posts",
            json!([{"scroll": {"down": true, "pages": 1.0}}]),
        )
    })
}

// ---------------------------------------------------------------- Python apps (PyPI)

/// An app of the corpus written in Python (`tests/python/{name}/app.py`), as a child process in
/// its pinned virtualenv (`tests/python/{name}/requirements.txt`, made once by `scripts/venv`),
/// killed on drop. The app appends what it received, one JSON line each, to the file its
/// `WIDGETS_LOG` names.
pub struct PythonApp {
    pub url: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
    _child: tokio::process::Child,
}

impl PythonApp {
    /// Starts the virtualenv's `python` with the arguments `args(app.py, port)` gives and the
    /// environment `env` (and `PORT`, `WIDGETS_LOG`), and waits until `{url}{ready}` answers
    /// with a success.
    async fn start(
        name: &str,
        args: impl FnOnce(&std::path::Path, u16) -> Vec<std::ffi::OsString>,
        env: &[(&str, &str)],
        ready: &str,
    ) -> Self {
        let python = python_venv(&format!("tests/python/{name}/requirements.txt"));
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("received.jsonl");
        let script = repo_root().join(format!("tests/python/{name}/app.py"));
        let child = tokio::process::Command::new(python)
            .args(args(&script, port))
            .env("WIDGETS_LOG", &log)
            .env("PORT", port.to_string())
            .envs(env.iter().copied())
            .current_dir(dir.path())
            .stdout(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("start the {name} app: {e}"));
        let url = format!("http://127.0.0.1:{port}/");
        let probe = format!("{url}{ready}");
        browserd_llm::install_tls_provider();
        let client = reqwest::Client::new();
        let up = async {
            loop {
                if client
                    .get(&probe)
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success())
                {
                    break;
                }
                // The app is a child process starting up: poll its port (no event to wait on).
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(120), up)
            .await
            .unwrap_or_else(|_| panic!("the {name} app did not answer within 2 minutes"));
        Self {
            url,
            log,
            _dir: dir,
            _child: child,
        }
    }

    /// What the app received, in order (one value per line of its log).
    pub fn received(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// The Gradio app (`tests/python/gradio/app.py`); it logs each order.
pub struct GradioApp;

impl GradioApp {
    pub async fn start() -> PythonApp {
        PythonApp::start(
            "gradio",
            |script, _| vec![script.into()],
            &[("GRADIO_ANALYTICS_ENABLED", "False")],
            "",
        )
        .await
    }
}

pub const GRADIO_TASK: &str = "Order 37.5 kg of bananas";

/// Gradio: a Number holding 5 (typed into, it must become 37.5, not 537.5) and a Dropdown whose
/// options appear on click, in the second of two Tabs.
pub fn gradio_brain() -> Brain {
    Arc::new(|page: &str| {
        if page.contains("Ordered 37.5 kg of Bananas") {
            return done_reply("Ordered", true);
        }
        let Some((quantity, quantity_line)) = element_after(page, r"Quantity \(kg\)", "input")
        else {
            return match index_of(page, "button", r"role=tab[^\n]*/>\s*Order") {
                Some(i) => click("open the Order tab", i),
                // Gradio's own loading screen, shown while its modules load (`import()`, which
                // the settle does not see): wait, as a model would.
                None if page.contains("Loading") => {
                    reply("wait for the app", json!([{"wait": {"seconds": 1}}]))
                }
                None => lost(page),
            };
        };
        if !quantity_line.contains("value=37.5") {
            return input("enter the quantity", quantity, "37.5");
        }
        if let Some(i) = index_of(page, "li", r"/>\s*Bananas") {
            return click("choose bananas", i);
        }
        let Some((fruit, fruit_line)) = element_after(page, r"(?m)^\s*Fruit$", "input") else {
            return lost(page);
        };
        if !fruit_line.contains("value=Bananas") {
            return click("open the fruit list", fruit);
        }
        match index_of(page, "button", r"/>\s*Place order") {
            Some(i) => click("place the order", i),
            None => lost(page),
        }
    })
}

pub fn gradio_expected() -> Value {
    json!({"quantity": 37.5, "fruit": "Bananas"})
}

// ---------------------------------------------------------------- Streamlit (PyPI)

/// The Streamlit app (`tests/python/streamlit/app.py`), headless on 127.0.0.1, usage statistics
/// and the file watcher off; it logs each press of its button with the checkbox's state.
pub struct StreamlitApp;

impl StreamlitApp {
    pub async fn start() -> PythonApp {
        PythonApp::start(
            "streamlit",
            |script, port| {
                let mut args: Vec<std::ffi::OsString> =
                    vec!["-m".into(), "streamlit".into(), "run".into(), script.into()];
                for (flag, value) in [
                    ("--server.headless", "true"),
                    ("--server.address", "127.0.0.1"),
                    ("--server.port", &port.to_string()),
                    ("--browser.gatherUsageStats", "false"),
                    ("--server.fileWatcherType", "none"),
                ] {
                    args.push(flag.into());
                    args.push(value.into());
                }
                args
            },
            &[],
            "_stcore/health",
        )
        .await
    }
}

pub const STREAMLIT_TASK: &str = "Compute the total of the order with gift wrap";

/// What the app shows once it computed the total with gift wrap.
const STREAMLIT_RESULT: &str = "Total: 25 EUR, gift wrapped";

/// Streamlit: every widget event is a message on the app's WebSocket, answered by a re-run of
/// the app's script on the server, whose result is rendered from the messages it sends back.
/// In one step the brain ticks the checkbox and presses the button (two actions); once the
/// result is on the page it is done. If the capture after the step shows the ticked box but not
/// the result, it presses the button again, as a model would: the app's log then holds two
/// presses.
pub fn streamlit_brain() -> Brain {
    Arc::new(|page: &str| {
        if page.contains(STREAMLIT_RESULT) {
            return done_reply(STREAMLIT_RESULT, true);
        }
        let button = element_with_text(page, "button", "Compute total");
        // The checkbox is named by its label (`aria-label=Gift wrap`).
        let checkbox = Regex::new(r"\[(\d+)\]<input\b[^\n]*")
            .unwrap()
            .captures_iter(page)
            .map(|c| (c[1].parse::<u64>().unwrap(), c.get(0).unwrap().as_str()))
            .find(|(_, line)| line.contains("type=checkbox") && line.contains("Gift wrap"));
        let (Some(button), Some((checkbox, checkbox_line))) = (button, checkbox) else {
            // The app's page without its widgets yet (Streamlit loads each widget's code when
            // the script first uses it): wait, as a model would.
            return if page.contains("Gift shop") {
                reply("wait for the app", json!([{"wait": {"seconds": 1}}]))
            } else {
                lost(page)
            };
        };
        if checkbox_line.contains("checked=true") {
            return click("compute the total", button);
        }
        reply(
            "tick gift wrap and compute the total",
            json!([{"click": {"index": checkbox}}, {"click": {"index": button}}]),
        )
    })
}

pub fn streamlit_expected() -> Value {
    json!({"gift_wrap": true})
}

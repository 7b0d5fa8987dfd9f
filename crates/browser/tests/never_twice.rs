//! Never do a thing twice, against real Chromium: a click that reached the page is never sent
//! again, whatever the page made of it at once — a checkbox whose state the server sets 300 ms
//! later over a WebSocket is toggled once; clicks inside a WebSocket app in a same-site
//! (cross-origin, same process) and a cross-site (out-of-process) iframe are real mouse clicks,
//! and the settle after them follows the frame, so the capture shows the app's answer and the
//! server archives once; and `wait` lasts until what the page said it was loading is replaced,
//! or the whole time asked. Each assertion is on what the server received.

mod support;

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    Router,
    extract::{
        Query, State,
        ws::{Message, WebSocket, WebSocketUpgrade},
    },
    response::{Html, Response},
    routing::get,
};
use browserd_browser::{
    Action, ActionContext, ActionResult, BrowserSession, CaptureOptions, PageState,
    actions::{ClickParams, WaitParams},
};
use support::rt;

/// What the servers received: toggles of the gift-wrap box and archive commands.
#[derive(Clone, Default)]
struct Received(Arc<Mutex<Vec<String>>>);

impl Received {
    fn count(&self, prefix: &str) -> usize {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|m| m.starts_with(prefix))
            .count()
    }

    fn push(&self, message: String) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(message);
    }
}

/// Two servers on two ports of 127.0.0.1 (two origins of one site) with the same routes and
/// the same record; `localhost:<port>` is a second site.
async fn servers() -> (SocketAddr, SocketAddr, Received) {
    static SERVERS: tokio::sync::OnceCell<(SocketAddr, SocketAddr, Received)> =
        tokio::sync::OnceCell::const_new();
    SERVERS
        .get_or_init(|| async {
            let received = Received::default();
            let mut addrs = Vec::new();
            for _ in 0..2 {
                let app = Router::new()
                    .route("/gift", get(|| async { Html(GIFT_PAGE) }))
                    .route("/shipments", get(|| async { Html(SHIPMENTS_PAGE) }))
                    .route("/host", get(host_page))
                    .route("/availability", get(|| async { Html(AVAILABILITY_PAGE) }))
                    .route("/quiet", get(|| async { Html(QUIET_PAGE) }))
                    .route("/lookup", get(|| async { Html(LOOKUP_PAGE) }))
                    .route("/closed", get(|| async { Html(CLOSED_SHADOW_PAGE) }))
                    .route("/busy", get(|| async { Html(BUSY_PAGE) }))
                    .route("/ws", get(socket))
                    .with_state(received.clone());
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind");
                addrs.push(listener.local_addr().expect("addr"));
                tokio::spawn(async move {
                    let _ = axum::serve(listener, app).await;
                });
            }
            (addrs[0], addrs[1], received)
        })
        .await
        .clone()
}

/// The app server: `toggle <what>` answers `state <what> <on|off>` after 300 ms (the server
/// owns the state); `archive <ids>` answers `archived <n>` after 400 ms.
async fn socket(upgrade: WebSocketUpgrade, State(received): State<Received>) -> Response {
    upgrade.on_upgrade(move |mut ws: WebSocket| async move {
        let mut on = std::collections::HashSet::new();
        while let Some(Ok(message)) = ws.recv().await {
            let Message::Text(text) = message else {
                continue;
            };
            let text = text.as_str().to_owned();
            received.push(text.clone());
            let answer = if let Some(what) = text.strip_prefix("toggle ") {
                tokio::time::sleep(Duration::from_millis(300)).await;
                let state = if on.insert(what.to_owned()) {
                    "on"
                } else {
                    on.remove(what);
                    "off"
                };
                format!("state {what} {state}")
            } else if let Some(ids) = text.strip_prefix("archive ") {
                tokio::time::sleep(Duration::from_millis(400)).await;
                format!(
                    "archived {}",
                    ids.split(',').filter(|s| !s.is_empty()).count()
                )
            } else {
                continue;
            };
            if ws.send(Message::Text(answer.into())).await.is_err() {
                return;
            }
        }
    })
}

/// A checkout whose "Gift wrap" box (`div role=checkbox`) shows the state the server sends back.
const GIFT_PAGE: &str = r#"<!doctype html><title>Checkout</title>
<h1>Checkout</h1>
<div id="gift" role="checkbox" aria-checked="false" tabindex="0"
     style="display:inline-block;padding:8px;border:1px solid #888;cursor:pointer">Gift wrap</div>
<p id="status">Connecting</p>
<script>
const ws = new WebSocket('ws://' + location.host + '/ws');
const box = document.getElementById('gift');
ws.onopen = () => { document.getElementById('status').textContent = 'Ready'; };
ws.onmessage = (event) => {
  const [, what, state] = event.data.split(' ');
  if (what === 'gift') {
    box.setAttribute('aria-checked', state === 'on' ? 'true' : 'false');
    box.textContent = state === 'on' ? 'Gift wrap (added)' : 'Gift wrap';
  }
};
box.addEventListener('click', () => ws.send('toggle gift'));
</script>"#;

/// A shipments table with a box per row and "Archive selected", over a WebSocket.
const SHIPMENTS_PAGE: &str = r#"<!doctype html><title>Shipments</title>
<table>
  <tr><td><input type="checkbox" id="row-1" data-id="SHP-1" aria-label="Select SHP-1"></td><td>SHP-1</td><td>Lisbon</td></tr>
  <tr><td><input type="checkbox" id="row-2" data-id="SHP-2" aria-label="Select SHP-2"></td><td>SHP-2</td><td>Oslo</td></tr>
</table>
<button id="archive">Archive selected</button>
<p id="result"></p>
<script>
const ws = new WebSocket('ws://' + location.host + '/ws');
ws.onmessage = (event) => {
  const n = event.data.split(' ')[1];
  document.getElementById('result').textContent = 'Archived ' + n + ' shipment(s)';
};
document.getElementById('archive').addEventListener('click', () => {
  const ids = [...document.querySelectorAll('input:checked')].map((b) => b.dataset.id);
  ws.send('archive ' + ids.join(','));
});
</script>"#;

#[derive(serde::Deserialize)]
struct HostQuery {
    src: String,
}

/// A page that embeds `src` in an iframe, below a header.
async fn host_page(Query(q): Query<HostQuery>) -> Html<String> {
    Html(format!(
        r#"<!doctype html><title>Operations</title>
<h1 style="margin:40px 0 20px 60px">Operations</h1>
<iframe src="{}" style="margin-left:60px;width:600px;height:300px;border:2px solid #444"></iframe>"#,
        q.src
    ))
}

/// Says "Checking availability…" for 2.5 s, then shows the answer.
const AVAILABILITY_PAGE: &str = r#"<!doctype html><title>Rooms</title>
<h1>Rooms</h1><p id="answer">Checking availability…</p>
<script>
setTimeout(() => { document.getElementById('answer').textContent = '3 rooms available'; }, 2500);
</script>"#;

/// A switch inside a closed shadow root (the window's view of the click's path stops at the
/// host): each click flips it and counts.
const CLOSED_SHADOW_PAGE: &str = r#"<!doctype html><title>Settings</title>
<settings-switch></settings-switch>
<script>
window.flips = 0;
customElements.define('settings-switch', class extends HTMLElement {
  constructor() {
    super();
    const root = this.attachShadow({ mode: 'closed' });
    root.innerHTML = '<div id="dark" role="switch" aria-checked="false" tabindex="0" style="display:inline-block;padding:8px;border:1px solid #888">Dark mode</div>';
    const box = root.getElementById('dark');
    box.addEventListener('click', () => {
      window.flips += 1;
      // The state shows later, as if a server confirmed it.
      setTimeout(() => box.setAttribute('aria-checked', box.getAttribute('aria-checked') === 'true' ? 'false' : 'true'), 300);
    });
  }
});
</script>"#;

/// A lookup field: Enter asks the server, whose answer shows 300 ms later.
const LOOKUP_PAGE: &str = r#"<!doctype html><title>Lookup</title>
<input id="query" aria-label="Query"> <p id="found"></p>
<script>
const ws = new WebSocket('ws://' + location.host + '/ws');
ws.onmessage = (event) => {
  document.getElementById('found').textContent = 'Found: ' + event.data.split(' ')[2];
};
document.getElementById('query').addEventListener('keydown', (event) => {
  if (event.key === 'Enter') ws.send('toggle lookup-' + Math.random().toString(36).slice(2));
});
</script>"#;

/// A button whose mousedown handler keeps the page busy for 6 s (longer than Chrome may take
/// to acknowledge a mouse press, `timeouts::MOUSE_PRESSED`, 3 s): the click reaches the page,
/// then fails waiting for it.
const BUSY_PAGE: &str = r#"<!doctype html><title>Busy</title>
<button id="pay">Pay</button>
<script>
window.presses = 0;
document.getElementById('pay').addEventListener('mousedown', () => {
  window.presses += 1;
  const until = Date.now() + 6000;
  while (Date.now() < until) {}
});
</script>"#;

const QUIET_PAGE: &str = r#"<!doctype html><title>Quiet</title><p>Nothing is loading here.</p>"#;

async fn open(guard: &support::PoolGuard, url: &str) -> BrowserSession {
    let session = guard.pool().lease().await.expect("lease");
    session.navigate(url).await.expect("navigate");
    session
}

async fn capture(session: &BrowserSession) -> PageState {
    session
        .capture(&CaptureOptions::default())
        .await
        .expect("capture")
}

async fn run(session: &BrowserSession, action: Action) -> ActionResult {
    let result = session.execute(&action, &ActionContext::default()).await;
    assert!(result.error.is_none(), "unexpected error: {result:?}");
    result
}

fn click(index: u32) -> Action {
    Action::Click(ClickParams {
        index: Some(index),
        coordinate_x: None,
        coordinate_y: None,
    })
}

fn memory(result: &ActionResult) -> String {
    result.long_term_memory.clone().unwrap_or_default()
}

/// The index of the element whose `id` is `id`.
fn index_by_id(state: &PageState, id: &str) -> u32 {
    state
        .selector_map
        .values()
        .find(|e| e.attr("id") == Some(id))
        .unwrap_or_else(|| panic!("no element #{id} in:\n{}", state.llm_text))
        .index
}

/// Waits (on the page, at most 10 s) until `expression` is true.
async fn page_condition(session: &BrowserSession, expression: &str) {
    let target = session.focused_target().await.expect("tab");
    let script = format!(
        "new Promise((resolve) => {{ const t0 = Date.now(); const f = () => ({expression}) ? resolve(true) : (Date.now() - t0 > 10000 ? resolve(false) : setTimeout(f, 20)); f(); }})"
    );
    let raw = session
        .cdp(
            Some(&target),
            "Runtime.evaluate",
            serde_json::json!({"expression": script, "awaitPromise": true, "returnByValue": true}),
        )
        .await
        .expect("evaluate");
    let v: serde_json::Value = serde_json::from_str(raw.as_str()).expect("json");
    assert_eq!(
        v["result"]["result"]["value"], true,
        "page never met: {expression}"
    );
}

/// The server sets the box's state 300 ms after the click: the mouse click that sent the toggle
/// is the only one (before, the state read right after the click was unchanged, and a
/// JavaScript click toggled it back).
#[test]
fn a_box_the_server_sets_later_is_toggled_once() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let (addr, _, received) = servers().await;
        let session = open(&guard, &format!("http://{addr}/gift")).await;
        page_condition(
            &session,
            "document.getElementById('status').textContent === 'Ready'",
        )
        .await;
        let before = received.count("toggle gift");
        let state = capture(&session).await;
        let result = run(&session, click(index_by_id(&state, "gift"))).await;
        assert!(
            !memory(&result).contains("JavaScript"),
            "a real click, sent once: {result:?}"
        );
        let after = capture(&session).await;
        assert_eq!(received.count("toggle gift") - before, 1, "{result:?}");
        assert!(
            after.llm_text.contains("Gift wrap (added)"),
            "the capture after the click shows the server's answer:\n{}",
            after.llm_text
        );
        session.release().await;
    });
}

/// Ticks a row's box and presses "Archive selected" inside the iframe at `frame_url`: both are
/// mouse clicks, the capture after the press shows the app's answer, the server archives once.
/// Each test ticks its own row (`row`: 1 or 2), so that tests running together count apart.
async fn archive_in_frame(guard: &support::PoolGuard, host: SocketAddr, frame_url: &str, row: u32) {
    let command = format!("archive SHP-{row}");
    let (_, _, received) = servers().await;
    let session = open(guard, &format!("http://{host}/host?src={frame_url}")).await;
    let state = capture(&session).await;
    let before = received.count(&command);
    let ticked = run(&session, click(index_by_id(&state, &format!("row-{row}")))).await;
    assert!(
        !memory(&ticked).contains("JavaScript"),
        "{frame_url}: the row's box gets a real mouse click: {ticked:?}"
    );
    let state = capture(&session).await;
    let pressed = run(&session, click(index_by_id(&state, "archive"))).await;
    assert!(
        !memory(&pressed).contains("JavaScript"),
        "{frame_url}: the button gets a real mouse click: {pressed:?}"
    );
    let after = capture(&session).await;
    assert!(
        after.llm_text.contains("Archived 1 shipment(s)"),
        "{frame_url}: the capture after the press shows the app's answer ({:?}):\n{}",
        pressed.metadata.as_ref().and_then(|m| m.get("settle")),
        after.llm_text
    );
    assert_eq!(
        received.count(&command) - before,
        1,
        "{frame_url}: archived once"
    );
    session.release().await;
}

/// Same site, another origin (another port): the frame shares the page's process and session,
/// its quads are in the page's coordinates, and no same-origin parent reaches its tracker.
#[test]
fn clicks_in_a_same_site_frame_are_real_and_settled() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let (host, other, _) = servers().await;
        archive_in_frame(&guard, host, &format!("http://{other}/shipments"), 1).await;
    });
}

/// Another site: the frame is out of process, with its own target and session.
#[test]
fn clicks_in_a_cross_site_frame_are_real_and_settled() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let (host, other, _) = servers().await;
        archive_in_frame(
            &guard,
            host,
            &format!("http://localhost:{}/shipments", other.port()),
            2,
        )
        .await;
    });
}

/// `wait` on a page that says "Checking availability…" returns once the answer replaced it
/// (before the time asked); on a page that says nothing is loading it waits the whole time.
#[test]
fn wait_lasts_until_the_loading_message_is_replaced_or_the_time_asked() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let (addr, _, _) = servers().await;
        let session = open(&guard, &format!("http://{addr}/availability")).await;
        let result = run(&session, Action::Wait(WaitParams { seconds: 20 })).await;
        let after = capture(&session).await;
        assert!(
            after.llm_text.contains("3 rooms available"),
            "{result:?}\n{}",
            after.llm_text
        );
        assert!(
            memory(&result).contains("loading message was replaced")
                && memory(&result).contains("Checking availability"),
            "{result:?}"
        );
        session.release().await;

        let session = open(&guard, &format!("http://{addr}/quiet")).await;
        let started = std::time::Instant::now();
        let result = run(&session, Action::Wait(WaitParams { seconds: 1 })).await;
        assert!(
            started.elapsed() >= Duration::from_secs(1),
            "the whole second asked: {result:?}"
        );
        assert_eq!(memory(&result), "Waited for 1 seconds");
        session.release().await;
    });
}

/// A lookup field in a same-site frame: Enter sends the query over the frame's WebSocket and
/// the answer shows 300 ms later. `send_keys` goes to the focused frame, and the settle after it
/// follows that frame, so the capture shows the answer.
#[test]
fn keys_sent_into_a_same_site_frame_are_settled_in_it() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let (host, other, received) = servers().await;
        let session = open(
            &guard,
            &format!("http://{host}/host?src=http://{other}/lookup"),
        )
        .await;
        let state = capture(&session).await;
        run(&session, click(index_by_id(&state, "query"))).await;
        let before = received.count("toggle lookup");
        let typed = session
            .execute(
                &Action::SendKeys(browserd_browser::actions::SendKeysParams {
                    keys: "Enter".into(),
                }),
                &ActionContext::default(),
            )
            .await;
        assert!(typed.error.is_none(), "{typed:?}");
        let after = capture(&session).await;
        assert!(
            after.llm_text.contains("Found: on"),
            "the capture after the keys shows the frame's answer ({:?}):\n{}",
            typed.metadata.as_ref().and_then(|m| m.get("settle")),
            after.llm_text
        );
        assert_eq!(received.count("toggle lookup") - before, 1);
        session.release().await;
    });
}

/// A switch in a closed shadow root: the mouse click reaches it (seen by a listener on the
/// element itself), so it is not sent again.
#[test]
fn a_switch_in_a_closed_shadow_root_is_clicked_once() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let (addr, _, _) = servers().await;
        let session = open(&guard, &format!("http://{addr}/closed")).await;
        let state = capture(&session).await;
        let index = state
            .selector_map
            .values()
            .find(|e| e.attr("role") == Some("switch"))
            .unwrap_or_else(|| panic!("the switch is indexed:\n{}", state.llm_text))
            .index;
        let result = run(&session, click(index)).await;
        assert!(!memory(&result).contains("JavaScript"), "{result:?}");
        page_condition(&session, "window.flips === 1").await;
        let flips = session
            .cdp(
                Some(&session.focused_target().await.expect("tab")),
                "Runtime.evaluate",
                serde_json::json!({"expression": "window.flips", "returnByValue": true}),
            )
            .await
            .expect("evaluate");
        let v: serde_json::Value = serde_json::from_str(flips.as_str()).expect("json");
        assert_eq!(v["result"]["result"]["value"], 1, "{result:?}");
        session.release().await;
    });
}

/// A failed action says whether it reached the page: a click whose press the busy page did not
/// acknowledge in time has reached it (`sent_to_page: true`, so a replay does not send it
/// again), an index the page no longer has never did (`false`).
#[test]
fn a_click_that_fails_after_reaching_the_page_says_so() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let (addr, _, _) = servers().await;
        let session = open(&guard, &format!("http://{addr}/busy")).await;
        let state = capture(&session).await;
        let pay = index_by_id(&state, "pay");

        let missing = session
            .execute(&click(pay + 1000), &ActionContext::default())
            .await;
        assert!(missing.error.is_some(), "{missing:?}");
        assert_eq!(missing.sent_to_page(), Some(false), "{missing:?}");

        let busy = session
            .execute(&click(pay), &ActionContext::default())
            .await;
        assert!(busy.error.is_some(), "the press timed out: {busy:?}");
        assert_eq!(busy.sent_to_page(), Some(true), "{busy:?}");
        page_condition(&session, "window.presses === 1").await;
        session.release().await;
    });
}

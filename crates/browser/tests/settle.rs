//! Settling after actions, against real Chromium: the capture after an action shows what the
//! action started once it has finished (requests answered after 0 ms, 300 ms and 1.5 s, a
//! 100 ms timer, a form that navigates to a page that loads its data, same- and cross-origin
//! frames, a dropdown's closing transition and the frame after it, an IntersectionObserver
//! feed's next page, a WebSocket app's answer — streamed, or paused by the server's work while the
//! page says it is busy —, a single-page app's loading screen, a lazily loaded widget), and pages
//! that never go quiet (a hanging long poll, an EventSource feed, a ticking clock, an
//! animation) do not cost the cap.

mod support;

use std::{
    collections::HashMap,
    convert::Infallible,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    Router,
    body::{Body, Bytes},
    extract::{
        Path, Query, State,
        ws::{Message, WebSocket, WebSocketUpgrade},
    },
    http::{StatusCode, header},
    response::{Html, IntoResponse, Response},
    routing::get,
};
use browserd_browser::{
    Action, ActionContext, ActionResult, BrowserSession, CaptureOptions, PageState, SettleEnd,
    SettleReport,
    actions::{ClickParams, InputParams, NavigateParams, ScrollParams},
};
use support::rt;

/// Requests per `key` the fetch endpoint answered.
#[derive(Clone, Default)]
struct Counts(Arc<Mutex<HashMap<String, u32>>>);

impl Counts {
    fn get(&self, key: &str) -> u32 {
        *self
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .unwrap_or(&0)
    }
}

async fn server() -> (SocketAddr, Counts) {
    static SERVER: tokio::sync::OnceCell<(SocketAddr, Counts)> = tokio::sync::OnceCell::const_new();
    SERVER
        .get_or_init(|| async {
            let counts = Counts::default();
            let app = Router::new()
                .route("/add", get(add_page))
                .route("/api/add", get(api_add))
                .route("/timer", get(|| async { Html(TIMER_PAGE) }))
                .route("/chatty", get(|| async { Html(CHATTY_PAGE) }))
                .route("/hang", get(hang))
                .route("/status", get(|| async { "ok" }))
                .route("/feed", get(feed))
                .route("/form", get(|| async { Html(FORM_PAGE) }))
                .route("/landed", get(|| async { Html(LANDED_PAGE) }))
                .route("/frames", get(frames_page))
                .route("/static", get(|| async { Html(STATIC_PAGE) }))
                .route("/multi", get(|| async { Html(MULTI_PAGE) }))
                .route("/fixture/{name}", get(fixture))
                .route("/feed-page", get(feed_page))
                .route("/api/config", get(config))
                .route("/api/module", get(module))
                .route("/ws", get(socket))
                .with_state(counts.clone());
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            let addr = listener.local_addr().expect("addr");
            tokio::spawn(async move {
                let _ = axum::serve(listener, app).await;
            });
            (addr, counts)
        })
        .await
        .clone()
}

#[derive(serde::Deserialize)]
struct AddQuery {
    key: String,
    #[serde(default)]
    delay: u64,
}

/// A shop-like page: "Add" fetches the API, then shows "Added" and the server's count.
async fn add_page(Query(q): Query<AddQuery>) -> Html<String> {
    Html(format!(
        r#"<!doctype html><title>Add</title>
<button id="add">Add</button> <p>In cart: <span id="count">0 items</span></p>
<script>
document.getElementById('add').addEventListener('click', async () => {{
  const res = await fetch('/api/add?key={key}&delay={delay}');
  const body = await res.json();
  document.getElementById('add').textContent = 'Added';
  document.getElementById('count').textContent = body.count + ' items';
}});
</script>"#,
        key = q.key,
        delay = q.delay
    ))
}

async fn api_add(State(counts): State<Counts>, Query(q): Query<AddQuery>) -> Response {
    tokio::time::sleep(Duration::from_millis(q.delay)).await;
    let count = {
        let mut map = counts.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = map.entry(q.key).or_insert(0);
        *n += 1;
        *n
    };
    (
        [(header::CONTENT_TYPE, "application/json")],
        format!("{{\"count\":{count}}}"),
    )
        .into_response()
}

/// A page of `tests/fixtures/settle/`.
async fn fixture(Path(name): Path<String>) -> Response {
    if name.contains('/') || name.contains("..") {
        return StatusCode::BAD_REQUEST.into_response();
    }
    let path = support::fixtures_dir().join("settle").join(name);
    match tokio::fs::read(path).await {
        Ok(bytes) => ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], bytes).into_response(),
        Err(_) => StatusCode::NOT_FOUND.into_response(),
    }
}

#[derive(serde::Deserialize)]
struct Delayed {
    #[serde(default)]
    page: u32,
    #[serde(default)]
    delay: u64,
    /// The WebSocket's answer comes in this many messages, `delay` ms apart.
    #[serde(default)]
    parts: u32,
    /// The WebSocket answers `started` at once, then works this many ms before its answer.
    #[serde(default)]
    work: u64,
}

/// Page `page` of the feed (ten post titles), after `delay` ms.
async fn feed_page(Query(q): Query<Delayed>) -> Response {
    tokio::time::sleep(Duration::from_millis(q.delay)).await;
    let first = q.page.saturating_sub(1) * 10 + 1;
    let titles: Vec<String> = (first..first + 10).map(|n| format!("Post {n}")).collect();
    (
        [(header::CONTENT_TYPE, "application/json")],
        serde_json::to_string(&titles).expect("json"),
    )
        .into_response()
}

/// The single-page app's configuration, after `delay` ms.
async fn config(Query(q): Query<Delayed>) -> Response {
    tokio::time::sleep(Duration::from_millis(q.delay)).await;
    (
        [(header::CONTENT_TYPE, "application/json")],
        r#"{"title":"Inventory"}"#,
    )
        .into_response()
}

/// A WebSocket that answers each text message after `delay` ms, or with `parts` messages
/// `delay` ms apart (`part 1 of n`, …, then the answer), or (`work`) with `started` at once and
/// the answer `work` ms later.
async fn socket(upgrade: WebSocketUpgrade, Query(q): Query<Delayed>) -> Response {
    upgrade.on_upgrade(move |mut ws: WebSocket| async move {
        while let Some(Ok(message)) = ws.recv().await {
            if let Message::Text(text) = message {
                let answer = if text.as_str() == "six times seven" {
                    "42".to_owned()
                } else {
                    format!("unknown question {}", text.as_str())
                };
                if q.work > 0 {
                    if ws.send(Message::Text("started".into())).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(q.work)).await;
                    if ws.send(Message::Text(answer.into())).await.is_err() {
                        return;
                    }
                    continue;
                }
                let parts = q.parts.max(1);
                let mut messages: Vec<String> = (1..parts)
                    .map(|n| format!("part {n} of {}", parts - 1))
                    .collect();
                messages.push(answer);
                for message in messages {
                    tokio::time::sleep(Duration::from_millis(q.delay)).await;
                    if ws.send(Message::Text(message.into())).await.is_err() {
                        return;
                    }
                }
            }
        }
    })
}

/// Never answers (a long poll).
async fn hang() -> &'static str {
    std::future::pending::<()>().await;
    ""
}

/// An endless EventSource feed, one message every 100 ms.
async fn feed() -> Response {
    let stream = futures::stream::unfold(0u64, |n| async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        Some((
            Ok::<_, Infallible>(Bytes::from(format!("data: item {n}\n\n"))),
            n + 1,
        ))
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(stream))
        .expect("response")
}

const TIMER_PAGE: &str = r#"<!doctype html><title>Timer</title>
<button id="go">Show</button> <p id="out">Nothing yet</p>
<script>
document.getElementById('go').addEventListener('click', () => {
  setTimeout(() => { document.getElementById('out').textContent = 'Shown after the timer'; }, 100);
});
</script>"#;

const CHATTY_PAGE: &str = r#"<!doctype html><title>Chatty</title>
<style>@keyframes spin { to { transform: rotate(360deg); } } #spinner { width: 20px; height: 20px; background: red; animation: spin 1s linear infinite; }</style>
<div id="spinner"></div><div id="mover" style="width:10px;height:10px;background:blue"></div>
<button id="go">Mark</button> <p id="status">Not clicked</p>
<p>Clock: <span id="clock"></span> <span id="ticks"></span></p><ul id="feed"></ul>
<script>
fetch('/hang').catch(() => {});
const source = new EventSource('/feed');
source.onmessage = (e) => {
  const li = document.createElement('li'); li.textContent = e.data;
  const feed = document.getElementById('feed'); feed.prepend(li);
  while (feed.children.length > 5) feed.lastChild.remove();
};
setInterval(() => { document.getElementById('clock').textContent = String(Date.now()); }, 50);
// A loop sleeping on promises (its timers come from microtasks, not from timer callbacks).
(async () => {
  for (let n = 0; ; n++) {
    await new Promise((resolve) => setTimeout(resolve, 300));
    document.getElementById('ticks').textContent = 'tick ' + n;
  }
})();
// A status poll: a request, a short sleep, again.
(async () => {
  for (;;) {
    await (await fetch('/status')).text();
    await new Promise((resolve) => setTimeout(resolve, 150));
  }
})();
let x = 0;
(function frame() { x = (x + 1) % 200; document.getElementById('mover').style.marginLeft = x + 'px'; requestAnimationFrame(frame); })();
document.getElementById('go').addEventListener('click', () => {
  document.getElementById('status').textContent = 'Clicked';
});
</script>"#;

const FORM_PAGE: &str = r#"<!doctype html><title>Form</title>
<form action="/landed" method="get"><input id="q" name="q"><button id="send">Send</button></form>"#;

/// Loads its content with a fetch after the load event (a single-page app's first render).
const LANDED_PAGE: &str = r#"<!doctype html><title>Landed</title>
<p id="state">Loading…</p>
<script>
addEventListener('load', async () => {
  const res = await fetch('/api/add?key=landed&delay=300');
  await res.json();
  document.getElementById('state').textContent = 'Results ready for ' + new URLSearchParams(location.search).get('q');
});
</script>"#;

/// Three "Add" buttons calling the same endpoint (300 ms): clicked one after the other, fast.
const MULTI_PAGE: &str = r#"<!doctype html><title>Multi</title>
<button id="add-1">Add one</button> <button id="add-2">Add two</button> <button id="add-3">Add three</button>
<p>Cart: <span id="cart">empty</span></p>
<script>
for (const button of document.querySelectorAll('button')) {
  button.addEventListener('click', async () => {
    const body = await (await fetch('/api/add?key=multi&delay=300')).json();
    button.textContent = 'Added';
    document.getElementById('cart').textContent = body.count + ' items';
  });
}
</script>"#;

const STATIC_PAGE: &str = r#"<!doctype html><title>Static</title>
<input id="name" placeholder="Name"><div style="height:3000px">Tall</div>"#;

/// A page with a same-origin and a cross-origin frame, each an "Add" page.
async fn frames_page(Query(q): Query<HashMap<String, String>>) -> Html<String> {
    let other = q.get("other").cloned().unwrap_or_default();
    Html(format!(
        r#"<!doctype html><title>Frames</title>
<iframe id="same" src="/add?key=frame-same&delay=300" width="400" height="150"></iframe>
<iframe id="cross" src="http://{other}/add?key=frame-cross&delay=300" width="400" height="150"></iframe>"#
    ))
}

async fn open(guard: &support::PoolGuard, path: &str) -> BrowserSession {
    open_with(guard, path, browserd_browser::ContextOptions::default()).await
}

/// [`open`] with a settle cap of `cap`.
async fn open_with_cap(guard: &support::PoolGuard, path: &str, cap: Duration) -> BrowserSession {
    let options = browserd_browser::ContextOptions {
        settle: browserd_browser::SettleSettings {
            cap,
            ..browserd_browser::SettleSettings::default()
        },
        ..browserd_browser::ContextOptions::default()
    };
    open_with(guard, path, options).await
}

async fn open_with(
    guard: &support::PoolGuard,
    path: &str,
    options: browserd_browser::ContextOptions,
) -> BrowserSession {
    let (addr, _) = server().await;
    let session = guard.pool().lease_with(options).await.expect("lease");
    session
        .navigate(&format!("http://{addr}{path}"))
        .await
        .expect("navigate");
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

fn settle_of(result: &ActionResult) -> SettleReport {
    let value = result
        .metadata
        .as_ref()
        .and_then(|m| m.get("settle"))
        .cloned()
        .unwrap_or_else(|| panic!("no settle report in {result:?}"));
    serde_json::from_value(value).expect("settle report")
}

/// The index of the element whose `id` is `id` (the first one in capture order).
fn index_of(state: &PageState, id: &str) -> u32 {
    let mut found: Vec<_> = state
        .selector_map
        .values()
        .filter(|e| e.attr("id") == Some(id))
        .collect();
    found.sort_by_key(|e| e.index);
    found
        .first()
        .map(|e| e.index)
        .unwrap_or_else(|| panic!("#{id} not indexed:\n{}", state.llm_text))
}

#[test]
fn the_capture_after_a_click_shows_the_fetched_result() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let (_, counts) = server().await;
        for delay in [0u64, 300, 1500] {
            let key = format!("click-{delay}");
            // A cap well above the slowest answer: on a loaded machine the page's own work
            // after the response takes time too, and ending on the cap is not what is tested.
            let path = format!("/add?key={key}&delay={delay}");
            let session = open_with_cap(&guard, &path, Duration::from_secs(6)).await;
            let before = capture(&session).await;
            let result = run(&session, click(index_of(&before, "add"))).await;
            let settle = settle_of(&result);
            let after = capture(&session).await;
            assert!(
                after.llm_text.contains("Added") && after.llm_text.contains("1 items"),
                "delay {delay} ms: the capture shows the state before the response ({settle:?}):\n{}",
                after.llm_text
            );
            assert_eq!(settle.ended, SettleEnd::Quiet, "delay {delay} ms");
            assert_eq!(counts.get(&key), 1, "delay {delay} ms: one request");
            session.release().await;
        }
    });
}

#[test]
fn a_short_timer_started_by_the_click_is_waited_for() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let session = open(&guard, "/timer").await;
        let before = capture(&session).await;
        let result = run(&session, click(index_of(&before, "go"))).await;
        let after = capture(&session).await;
        assert!(
            after.llm_text.contains("Shown after the timer"),
            "{:?}\n{}",
            settle_of(&result),
            after.llm_text
        );
        assert_eq!(settle_of(&result).ended, SettleEnd::Quiet);
        session.release().await;
    });
}

#[test]
fn long_polls_feeds_clocks_and_animations_do_not_hold_the_settle() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let session = open(&guard, "/chatty").await;
        // The loops a page runs on its own are recognised once they have gone round twice
        // before the action; a model's first click comes seconds after the page loads, so
        // click once the page has ticked several times (capturing until it has, capped): a
        // starved renderer's first rounds may not be seen as loops yet.
        let started = std::time::Instant::now();
        let before = loop {
            let state = capture(&session).await;
            let ticks = state
                .llm_text
                .split("tick ")
                .nth(1)
                .and_then(|t| t.split_whitespace().next())
                .and_then(|n| n.parse::<u32>().ok());
            if ticks.is_some_and(|n| n >= 8) {
                break state;
            }
            assert!(
                started.elapsed() < std::time::Duration::from_secs(60),
                "the chatty page never ticked:\n{}",
                state.llm_text
            );
        };
        let result = run(&session, click(index_of(&before, "go"))).await;
        let settle = settle_of(&result);
        assert_eq!(
            settle.ended,
            SettleEnd::Quiet,
            "the chatty page held the settle: {settle:?}"
        );
        let after = capture(&session).await;
        assert!(after.llm_text.contains("Clicked"), "{}", after.llm_text);
        // Arriving on the page: its long poll and loops do not hold the settle either.
        let (addr, _) = server().await;
        let arrived = run(
            &session,
            Action::Navigate(NavigateParams {
                url: format!("http://{addr}/chatty?again"),
                new_tab: false,
            }),
        )
        .await;
        let settle = settle_of(&arrived);
        assert_eq!(settle.ended, SettleEnd::Navigation, "{settle:?}");
        session.release().await;
    });
}

#[test]
fn a_submit_that_navigates_waits_for_the_next_page_and_its_data() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let session = open(&guard, "/form").await;
        let before = capture(&session).await;
        run(
            &session,
            Action::Input(InputParams {
                index: index_of(&before, "q"),
                text: "monitors".into(),
                clear: true,
            }),
        )
        .await;
        let result = run(&session, click(index_of(&before, "send"))).await;
        let settle = settle_of(&result);
        let after = capture(&session).await;
        assert!(
            after.llm_text.contains("Results ready for monitors"),
            "{settle:?}\n{}",
            after.llm_text
        );
        assert_eq!(settle.ended, SettleEnd::Navigation, "{settle:?}");
        session.release().await;
    });
}

#[test]
fn frames_that_update_after_a_fetch_are_waited_for() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let (addr, _) = server().await;
        // `localhost` is another site than 127.0.0.1: its frame is out of process.
        let other = format!("localhost:{}", addr.port());
        let session = open(&guard, &format!("/frames?other={other}")).await;
        for which in ["same", "cross"] {
            let before = capture(&session).await;
            let tab = session.focused_target().await.expect("tab");
            let adds: Vec<_> = before
                .selector_map
                .values()
                .filter(|e| e.attr("id") == Some("add"))
                .collect();
            assert_eq!(adds.len(), 2, "both frames captured:\n{}", before.llm_text);
            // The same-origin frame's elements belong to the tab's target, the other's to
            // the frame's own target.
            let index = adds
                .iter()
                .find(|e| (e.target_id == tab) == (which == "same"))
                .map(|e| e.index)
                .expect("the frame's button");
            let before_count = before.llm_text.matches("Added").count();
            let result = run(&session, click(index)).await;
            let after = capture(&session).await;
            assert_eq!(
                after.llm_text.matches("Added").count(),
                before_count + 1,
                "{which} frame: {:?}\n{}",
                settle_of(&result),
                after.llm_text
            );
        }
        session.release().await;
    });
}

#[test]
fn typing_and_scrolling_on_a_static_page_settle_at_once() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let session = open(&guard, "/static").await;
        let before = capture(&session).await;
        let typed = run(
            &session,
            Action::Input(InputParams {
                index: index_of(&before, "name"),
                text: "Ada".into(),
                clear: true,
            }),
        )
        .await;
        let scrolled = run(
            &session,
            Action::Scroll(ScrollParams {
                down: true,
                pages: 1.0,
                index: None,
            }),
        )
        .await;
        for result in [&typed, &scrolled] {
            let settle = settle_of(result);
            assert_eq!(settle.ended, SettleEnd::Quiet, "{settle:?}");
            assert!(settle.pending.is_empty(), "{settle:?}");
        }
        let navigated = run(
            &session,
            Action::Navigate(NavigateParams {
                url: format!("http://{}/timer", server().await.0),
                new_tab: false,
            }),
        )
        .await;
        assert_eq!(settle_of(&navigated).ended, SettleEnd::Navigation);
        session.release().await;
    });
}

#[test]
fn with_settling_off_a_submit_still_waits_for_its_navigation() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let (addr, _) = server().await;
        let session = guard
            .pool()
            .lease_with(browserd_browser::ContextOptions {
                settle: browserd_browser::SettleSettings {
                    cap: Duration::ZERO,
                    ..browserd_browser::SettleSettings::default()
                },
                ..browserd_browser::ContextOptions::default()
            })
            .await
            .expect("lease");
        session
            .navigate(&format!("http://{addr}/form"))
            .await
            .expect("navigate");
        let before = capture(&session).await;
        let result = run(&session, click(index_of(&before, "send"))).await;
        assert!(
            result
                .metadata
                .as_ref()
                .is_none_or(|m| m.get("settle").is_none()),
            "no settle with a zero cap: {result:?}"
        );
        let after = capture(&session).await;
        assert!(
            after.llm_text.contains("Loading") || after.llm_text.contains("Results ready"),
            "the click waited for the next page:\n{}",
            after.llm_text
        );
        session.release().await;
    });
}

#[test]
fn the_same_call_repeated_by_quick_actions_is_waited_for_each_time() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let session = open(&guard, "/multi").await;
        for n in 1..=3 {
            let before = capture(&session).await;
            let result = run(&session, click(index_of(&before, &format!("add-{n}")))).await;
            let after = capture(&session).await;
            assert!(
                after.llm_text.contains(&format!("{n} items")),
                "click {n}: {:?}\n{}",
                settle_of(&result),
                after.llm_text
            );
        }
        session.release().await;
    });
}

/// The index of the first element whose text is `text`.
fn index_by_text(state: &PageState, text: &str) -> u32 {
    let mut found: Vec<_> = state
        .selector_map
        .values()
        .filter(|e| e.text.trim() == text)
        .collect();
    found.sort_by_key(|e| e.index);
    found
        .first()
        .map(|e| e.index)
        .unwrap_or_else(|| panic!("no element {text:?}:\n{}", state.llm_text))
}

async fn navigate(session: &BrowserSession, path: &str) -> ActionResult {
    let (addr, _) = server().await;
    run(
        session,
        Action::Navigate(NavigateParams {
            url: format!("http://{addr}{path}"),
            new_tab: false,
        }),
    )
    .await
}

/// `fixtures/settle/dropdown.html`: choosing an option re-renders the main button empty, fades
/// the option list out over 200 ms and gives the button its text in the frame after the
/// transition; the capture after the choice shows neither the list nor the empty button.
#[test]
fn a_dropdown_is_captured_once_its_closing_transition_and_the_frame_after_it_ran() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let session = open_with_cap(&guard, "/fixture/dropdown.html", Duration::from_secs(6)).await;
        let closed = capture(&session).await;
        run(&session, click(index_of(&closed, "pick"))).await;
        let open = capture(&session).await;
        assert!(open.llm_text.contains("Cherry"), "{}", open.llm_text);
        let result = run(&session, click(index_by_text(&open, "Banana"))).await;
        let settle = settle_of(&result);
        let after = capture(&session).await;
        assert!(
            !after.llm_text.contains("Cherry") && after.llm_text.contains("Fruit: Banana"),
            "{settle:?}\n{}",
            after.llm_text
        );
        assert_eq!(settle.ended, SettleEnd::Quiet, "{settle:?}");
        session.release().await;
    });
}

/// `fixtures/settle/feed.html`: an IntersectionObserver (`rootMargin: 200px`) fetches the next
/// page (answered after 400 ms) when the sentinel under the last post comes near; the capture
/// right after `scroll down` shows the new posts.
#[test]
fn an_intersection_observer_feed_grows_in_the_capture_after_a_scroll() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let session = open_with_cap(&guard, "/static", Duration::from_secs(6)).await;
        navigate(&session, "/fixture/feed.html").await;
        let before = capture(&session).await;
        assert!(
            before.llm_text.contains("Post 10") && !before.llm_text.contains("Post 11"),
            "{}",
            before.llm_text
        );
        let result = run(
            &session,
            Action::Scroll(ScrollParams {
                down: true,
                pages: 1.0,
                index: None,
            }),
        )
        .await;
        let settle = settle_of(&result);
        let after = capture(&session).await;
        assert!(
            after.llm_text.contains("Post 11") && after.llm_text.contains("Post 12"),
            "{settle:?}\n{}",
            after.llm_text
        );
        assert_eq!(settle.ended, SettleEnd::Quiet, "{settle:?}");
        session.release().await;
    });
}

/// `fixtures/settle/shadow-dropdown.html`: a web component's listbox, in its shadow root, closes
/// with a 300 ms Web Animation there and the value shows once it finished; the capture after the
/// choice shows the value and no listbox (shadow roots' animations and mutations are tracked).
#[test]
fn a_shadow_dom_dropdown_is_captured_once_its_closing_animation_ran() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let session = open_with_cap(
            &guard,
            "/fixture/shadow-dropdown.html",
            Duration::from_secs(6),
        )
        .await;
        let closed = capture(&session).await;
        run(&session, click(index_of(&closed, "pick"))).await;
        let open = capture(&session).await;
        assert!(open.llm_text.contains("Team plan"), "{}", open.llm_text);
        let result = run(&session, click(index_by_text(&open, "Pro plan"))).await;
        let settle = settle_of(&result);
        let after = capture(&session).await;
        assert!(
            !after.llm_text.contains("Team plan") && after.llm_text.contains("Plan: Pro plan"),
            "{settle:?}\n{}",
            after.llm_text
        );
        assert_eq!(settle.ended, SettleEnd::Quiet, "{settle:?}");
        session.release().await;
    });
}

/// `fixtures/settle/virtual-list.html`: a list renders the rows in view from its scroll
/// listener, which runs at the frame after the scroll; the capture after scrolling the list
/// shows the rows now in view.
#[test]
fn a_virtual_list_shows_the_rows_scrolled_to() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let session =
            open_with_cap(&guard, "/fixture/virtual-list.html", Duration::from_secs(6)).await;
        let before = capture(&session).await;
        assert!(before.llm_text.contains("Row 10"), "{}", before.llm_text);
        let scroll = Action::Scroll(ScrollParams {
            down: true,
            pages: 10.0,
            index: Some(index_of(&before, "list")),
        });
        let result = run(&session, scroll).await;
        let settle = settle_of(&result);
        let after = capture(&session).await;
        assert!(
            after.llm_text.contains("Row 101"),
            "{settle:?}\n{}",
            after.llm_text
        );
        session.release().await;
    });
}

/// `fixtures/settle/websocket.html`: the button sends a WebSocket message, the server answers
/// 400 ms later and the page shows the answer; the capture after the click shows it. Arriving
/// on the page waits for its socket to open.
#[test]
fn a_websocket_answer_to_the_click_is_waited_for() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let session = open_with_cap(&guard, "/static", Duration::from_secs(6)).await;
        let arrived = navigate(&session, "/fixture/websocket.html").await;
        let before = capture(&session).await;
        assert!(
            before.llm_text.contains("Connected"),
            "{:?}\n{}",
            settle_of(&arrived),
            before.llm_text
        );
        let result = run(&session, click(index_of(&before, "ask"))).await;
        let settle = settle_of(&result);
        let after = capture(&session).await;
        assert!(
            after.llm_text.contains("Result: 42"),
            "{settle:?}\n{}",
            after.llm_text
        );
        assert_eq!(settle.ended, SettleEnd::Quiet, "{settle:?}");
        session.release().await;
    });
}

/// `fixtures/settle/websocket-stream.html`: the server answers the click in four messages
/// 100 ms apart (three progress parts, then the result; gaps longer than the quiet window), and
/// the page re-renders after each; the capture after the click shows the last one.
#[test]
fn a_websocket_answer_in_several_messages_is_waited_for_to_its_end() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let session = open_with_cap(&guard, "/static", Duration::from_secs(6)).await;
        let arrived = navigate(&session, "/fixture/websocket-stream.html").await;
        let before = capture(&session).await;
        assert!(
            before.llm_text.contains("Connected"),
            "{:?}\n{}",
            settle_of(&arrived),
            before.llm_text
        );
        let result = run(&session, click(index_of(&before, "ask"))).await;
        let settle = settle_of(&result);
        let after = capture(&session).await;
        assert!(
            after.llm_text.contains("Result: 42 after 3 parts"),
            "{settle:?}\n{}",
            after.llm_text
        );
        assert_eq!(settle.ended, SettleEnd::Quiet, "{settle:?}");
        session.release().await;
    });
}

/// `fixtures/settle/websocket-busy.html`: the server answers the click with `started` at once
/// (the page marks itself busy, nothing else changes), then works 600 ms (longer than the
/// socket's quiet window) before the result; the capture after the click shows the result, with
/// each kind of busy marker: a state attribute (Streamlit's), `aria-busy`, a class.
#[test]
fn a_websocket_answer_paused_by_the_servers_work_is_waited_for_while_the_page_says_busy() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let session = open_with_cap(&guard, "/static", Duration::from_secs(6)).await;
        for marker in ["state", "aria", "class"] {
            let arrived = navigate(
                &session,
                &format!("/fixture/websocket-busy.html?marker={marker}"),
            )
            .await;
            let before = capture(&session).await;
            assert!(
                before.llm_text.contains("Connected"),
                "{marker}: {:?}\n{}",
                settle_of(&arrived),
                before.llm_text
            );
            let result = run(&session, click(index_of(&before, "ask"))).await;
            let settle = settle_of(&result);
            let after = capture(&session).await;
            assert!(
                after.llm_text.contains("Result: 42"),
                "{marker}: {settle:?}\n{}",
                after.llm_text
            );
            assert_eq!(settle.ended, SettleEnd::Quiet, "{marker}: {settle:?}");
        }
        session.release().await;
    });
}

/// A JavaScript module answered after `delay` ms (what a blank app shell imports).
async fn module(Query(q): Query<Delayed>) -> Response {
    tokio::time::sleep(Duration::from_millis(q.delay)).await;
    (
        [(header::CONTENT_TYPE, "text/javascript")],
        "export const title = 'Inventory';",
    )
        .into_response()
}

/// `fixtures/settle/blank-shell.html`: an app whose body is empty until the module it imports
/// with `import()` (answered after 1.2 s; nothing tracks a dynamic import) has arrived and
/// rendered; the first capture shows the app, not an empty page.
#[test]
fn the_first_capture_waits_for_a_blank_app_shell_to_render() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let session = open_with_cap(&guard, "/static", Duration::from_secs(6)).await;
        let arrived = navigate(&session, "/fixture/blank-shell.html?delay=1200").await;
        let settle = settle_of(&arrived);
        let state = capture(&session).await;
        assert!(
            state.llm_text.contains("Inventory"),
            "{settle:?}\n{}",
            state.llm_text
        );
        session.release().await;
    });
}

/// `fixtures/settle/lazy-widget.html`: a page with text whose widget's code is a chunk
/// preloaded with `<link rel=modulepreload>` and imported (answered after 400 ms; the import
/// itself is not seen), as Vite apps load their widgets; the first capture shows the widget.
#[test]
fn the_first_capture_waits_for_a_preloaded_module_to_render() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let session = open_with_cap(&guard, "/static", Duration::from_secs(6)).await;
        let arrived = navigate(&session, "/fixture/lazy-widget.html?delay=400").await;
        let settle = settle_of(&arrived);
        let state = capture(&session).await;
        assert!(
            state.llm_text.contains("Gift wrap for Inventory"),
            "{settle:?}\n{}",
            state.llm_text
        );
        session.release().await;
    });
}

/// `fixtures/settle/loading.html`: a single-page app shows `Loading...` until its configuration
/// arrives (after 1.2 s: longer than a new document's requests count otherwise); the first
/// capture after arriving shows the app. A loading screen that never goes away costs the cap.
#[test]
fn the_first_capture_waits_for_a_loading_screen_to_be_replaced() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let session = open_with_cap(&guard, "/static", Duration::from_secs(6)).await;
        let arrived = navigate(&session, "/fixture/loading.html?delay=1200").await;
        let settle = settle_of(&arrived);
        let state = capture(&session).await;
        assert!(
            state.llm_text.contains("Inventory") && !state.llm_text.contains("Loading"),
            "{settle:?}\n{}",
            state.llm_text
        );
        assert_eq!(settle.ended, SettleEnd::Navigation, "{settle:?}");
        session.release().await;

        // The same app with its whole configuration inline in a script of the body (as Gradio
        // serves its apps): the page's text is still only "Loading...".
        let session = open_with_cap(&guard, "/static", Duration::from_secs(6)).await;
        let arrived = navigate(&session, "/fixture/loading-inline.html?delay=1200").await;
        let settle = settle_of(&arrived);
        let state = capture(&session).await;
        assert!(
            state.llm_text.contains("Inventory") && !state.llm_text.contains("Loading"),
            "{settle:?}\n{}",
            state.llm_text
        );
        session.release().await;

        let cap = Duration::from_millis(1000);
        let session = open_with_cap(&guard, "/static", cap).await;
        let arrived = navigate(&session, "/fixture/loading.html?delay=60000").await;
        let settle = settle_of(&arrived);
        assert_eq!(settle.ended, SettleEnd::Cap, "{settle:?}");
        session.release().await;
    });
}

//! Browser actions against real Chromium on local fixture pages (127.0.0.1 plus
//! `localhost` as a second origin), one shared Chrome per test binary.

mod support;

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    Router,
    extract::{Path, Query, RawQuery, State},
    http::{StatusCode, Uri, header},
    response::{IntoResponse, Redirect, Response},
    routing::get,
};
use browserd_browser::{
    Action, ActionContext, ActionResult, BrowserSession, CaptureOptions, ContextOptions,
    DownloadCaps, DownloadState, PageState, Viewport,
    actions::{
        ClickParams, DoneParams, EvaluateParams, ExtractParams, FindElementsParams, FindTextParams,
        IndexParams, InputParams, NavigateParams, NoParams, PaperFormat, SaveAsPdfParams,
        ScreenshotParams, ScrollParams, SearchEngine, SearchPageParams, SearchParams,
        SelectDropdownParams, SendKeysParams, TabParams, UploadFileParams, WaitParams,
    },
    egress::EgressSettings,
};
use serde_json::Value;
use support::rt;

#[derive(Clone, Default)]
struct Hits(Arc<Mutex<Vec<String>>>);

impl Hits {
    fn all(&self) -> Vec<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
    fn count(&self, prefix: &str) -> usize {
        self.all().iter().filter(|h| h.starts_with(prefix)).count()
    }
}

struct Server {
    addr: SocketAddr,
    hits: Hits,
}

async fn server() -> &'static Server {
    static SERVER: tokio::sync::OnceCell<Server> = tokio::sync::OnceCell::const_new();
    SERVER
        .get_or_init(|| async {
            let hits = Hits::default();
            let app = Router::new()
                .route("/hit/{name}", get(hit))
                .route("/download", get(download))
                .route("/big-download", get(big_download))
                .route("/redirect", get(redirect))
                .fallback(static_file)
                .with_state(hits.clone());
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            let addr = listener.local_addr().expect("addr");
            tokio::spawn(async move {
                let _ = axum::serve(listener, app).await;
            });
            Server { addr, hits }
        })
        .await
}

async fn hit(
    State(hits): State<Hits>,
    Path(name): Path<String>,
    RawQuery(q): RawQuery,
) -> &'static str {
    hits.0
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(format!("{name}?{}", q.unwrap_or_default()));
    "ok"
}

async fn download() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/plain"),
            (
                header::CONTENT_DISPOSITION,
                "attachment; filename=\"report.txt\"",
            ),
        ],
        "hello download",
    )
        .into_response()
}

/// A 3 MiB attachment.
async fn big_download() -> Response {
    (
        [
            (header::CONTENT_TYPE, "application/octet-stream"),
            (
                header::CONTENT_DISPOSITION,
                "attachment; filename=\"big.bin\"",
            ),
        ],
        vec![b'x'; 3 << 20],
    )
        .into_response()
}

#[derive(serde::Deserialize)]
struct To {
    to: String,
}

async fn redirect(State(hits): State<Hits>, Query(to): Query<To>) -> Redirect {
    hits.0
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push("redirect".into());
    Redirect::temporary(&to.to)
}

async fn static_file(uri: Uri) -> Response {
    let rel = uri.path().trim_start_matches('/');
    if rel.split('/').any(|p| p == "..") {
        return StatusCode::BAD_REQUEST.into_response();
    }
    match tokio::fs::read(support::fixtures_dir().join(rel)).await {
        Ok(bytes) => ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], bytes).into_response(),
        Err(_) => StatusCode::NOT_FOUND.into_response(),
    }
}

fn url(path: &str, addr: SocketAddr) -> String {
    format!("http://{addr}{path}")
}

fn ctx() -> ActionContext {
    ActionContext::default()
}

async fn open_form(guard: &support::PoolGuard) -> (BrowserSession, PageState) {
    let srv = server().await;
    let session = guard.pool().lease().await.expect("lease");
    session
        .navigate(&url("/actions/form.html", srv.addr))
        .await
        .expect("navigate");
    let state = capture(&session).await;
    (session, state)
}

async fn capture(session: &BrowserSession) -> PageState {
    session
        .capture(&CaptureOptions::default())
        .await
        .expect("capture")
}

fn index_of(state: &PageState, id: &str) -> u32 {
    state
        .selector_map
        .values()
        .find(|e| e.attr("id") == Some(id))
        .map(|e| e.index)
        .unwrap_or_else(|| panic!("#{id} not indexed:\n{}", state.llm_text))
}

/// Evaluates `expr` in the focused tab (not through the evaluate action).
async fn js(session: &BrowserSession, expr: &str) -> Value {
    let target = session.focused_target().await.expect("focused");
    let raw = session
        .cdp(
            Some(&target),
            "Runtime.evaluate",
            serde_json::json!({"expression": expr, "returnByValue": true, "awaitPromise": true}),
        )
        .await
        .expect("evaluate");
    let v: Value = serde_json::from_str(raw.as_str()).expect("json");
    v["result"]["result"]["value"].clone()
}

async fn run(session: &BrowserSession, action: Action) -> ActionResult {
    session.execute(&action, &ctx()).await
}

fn ok(result: &ActionResult) -> &str {
    assert!(result.error.is_none(), "unexpected error: {result:?}");
    result.extracted_content.as_deref().unwrap_or("")
}

fn err(result: &ActionResult) -> &str {
    result
        .error
        .as_deref()
        .unwrap_or_else(|| panic!("expected an error: {result:?}"))
}

async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    // What is awaited may be a page load on a shared, loaded Chrome: a generous cap.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

#[test]
fn input_types_and_reads_back() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let (session, state) = open_form(&guard).await;
        let user = index_of(&state, "user");
        let r = run(
            &session,
            Action::Input(InputParams {
                index: user,
                text: "alice@example.com-20".into(),
                clear: true,
            }),
        )
        .await;
        assert!(ok(&r).contains("alice@example.com-20"), "{r:?}");
        assert_eq!(
            js(&session, "document.getElementById('user').value").await,
            "alice@example.com-20"
        );
        let r = run(
            &session,
            Action::Input(InputParams {
                index: user,
                text: "!".into(),
                clear: false,
            }),
        )
        .await;
        ok(&r);
        assert_eq!(
            js(&session, "document.getElementById('user').value").await,
            "alice@example.com-20!"
        );
        // contenteditable
        let editor = index_of(&state, "editor");
        ok(&run(
            &session,
            Action::Input(InputParams {
                index: editor,
                text: "new words".into(),
                clear: true,
            }),
        )
        .await);
        assert_eq!(
            js(
                &session,
                "document.getElementById('editor').innerText.trim()"
            )
            .await,
            "new words"
        );
        // date input is set directly
        let when = index_of(&state, "when");
        ok(&run(
            &session,
            Action::Input(InputParams {
                index: when,
                text: "2024-02-29".into(),
                clear: true,
            }),
        )
        .await);
        assert_eq!(
            js(&session, "document.getElementById('when').value").await,
            "2024-02-29"
        );
        let bad = run(
            &session,
            Action::Input(InputParams {
                index: when,
                text: "tomorrow".into(),
                clear: true,
            }),
        )
        .await;
        assert!(err(&bad).contains("format"), "{bad:?}");
        // a stale index is an error the model can read
        let stale = run(
            &session,
            Action::Input(InputParams {
                index: 999_999,
                text: "x".into(),
                clear: true,
            }),
        )
        .await;
        assert!(err(&stale).contains("999999"), "{stale:?}");
        // send_keys: select all + Backspace empties the focused field, Enter submits the form
        ok(&run(
            &session,
            Action::Click(ClickParams {
                index: Some(user),
                coordinate_x: None,
                coordinate_y: None,
            }),
        )
        .await);
        ok(&run(
            &session,
            Action::SendKeys(SendKeysParams {
                keys: "Control+a".into(),
            }),
        )
        .await);
        ok(&run(
            &session,
            Action::SendKeys(SendKeysParams {
                keys: "Backspace".into(),
            }),
        )
        .await);
        assert_eq!(
            js(&session, "document.getElementById('user').value").await,
            ""
        );
        ok(&run(
            &session,
            Action::SendKeys(SendKeysParams { keys: "bob".into() }),
        )
        .await);
        ok(&run(
            &session,
            Action::SendKeys(SendKeysParams {
                keys: "Enter".into(),
            }),
        )
        .await);
        let srv = server().await;
        eventually("form submit hit", || async {
            srv.hits.all().contains(&"enter?user=bob".to_owned())
        })
        .await;
        session.release().await;
    });
}

/// Fields a framework controls (`fixtures/actions/controlled.html`: the app re-renders each field
/// from its state on every `input` event, and a value set through the element's own `value`
/// property is swallowed as React's value tracker does) end with the value meant, in the field
/// and in the app's state: a number written back on every event (typed key by key, `37.5` came out as
/// `537`: writing `37` back while `37.` is typed drops the dot and moves the caret), date, time and range
/// fields, a plain controlled text field, and one whose re-render moves the caret to the start
/// (typed keys come out reversed; the text then goes in at once). A field that reformats what
/// it is given keeps its format, and the result says so.
#[test]
fn controlled_fields_end_with_the_intended_value() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let srv = server().await;
        let session = guard.pool().lease().await.expect("lease");
        session
            .navigate(&url("/actions/controlled.html", srv.addr))
            .await
            .expect("navigate");
        let state = capture(&session).await;
        for (id, text, value) in [
            ("amount", "37.5", "37.5"),
            ("day", "2024-02-29", "2024-02-29"),
            ("at", "14:30", "14:30"),
            ("level", "70", "70"),
            ("name", "Ada Lovelace", "Ada Lovelace"),
            ("code", "XK-42", "XK-42"),
        ] {
            let result = run(
                &session,
                Action::Input(InputParams {
                    index: index_of(&state, id),
                    text: text.into(),
                    clear: true,
                }),
            )
            .await;
            let said = ok(&result);
            assert!(!said.contains("Note:"), "#{id}: {result:?}");
            assert_eq!(
                js(&session, &format!("document.getElementById('{id}').value")).await,
                value,
                "#{id}: {result:?}"
            );
            assert_eq!(
                js(&session, &format!("document.getElementById('{id}-state').textContent")).await,
                value,
                "#{id}: the app's state"
            );
        }
        // Appending to a number extends it.
        ok(&run(
            &session,
            Action::Input(InputParams {
                index: index_of(&state, "amount"),
                text: "25".into(),
                clear: false,
            }),
        )
        .await);
        assert_eq!(js(&session, "document.getElementById('amount-state').textContent").await, "37.525");
        // The capture shows what the app holds.
        let after = capture(&session).await;
        assert!(after.llm_text.contains("37.525"), "{}", after.llm_text);
        assert!(after.llm_text.contains("XK-42"), "{}", after.llm_text);
        // A number field given no number is an error naming the format.
        let bad = run(
            &session,
            Action::Input(InputParams {
                index: index_of(&state, "amount"),
                text: "thirty".into(),
                clear: true,
            }),
        )
        .await;
        assert!(err(&bad).contains("37.5"), "{bad:?}");
        // A field that formats what it is given: its value differs, and the result says so.
        let phone = run(
            &session,
            Action::Input(InputParams {
                index: index_of(&state, "phone"),
                text: "5551234567".into(),
                clear: true,
            }),
        )
        .await;
        assert!(
            ok(&phone).contains("Note: the field's actual value '(555) 123-4567' differs from typed text '5551234567'"),
            "{phone:?}"
        );
        assert_eq!(js(&session, "document.getElementById('phone-state').textContent").await, "5551234567");
        session.release().await;
    });
}

#[test]
fn clicks_checkbox_covered_shadow_iframe_and_server() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let srv = server().await;
        let (session, state) = open_form(&guard).await;
        let click = |index| Action::Click(ClickParams { index: Some(index), coordinate_x: None, coordinate_y: None });
        // checkbox toggles
        let r = run(&session, click(index_of(&state, "agree"))).await;
        ok(&r);
        assert!(r.metadata.as_ref().is_some_and(|m| m.contains_key("click_x")), "{r:?}");
        assert_eq!(js(&session, "document.getElementById('agree').checked").await, true);
        // covered button: JS fallback
        let covered = index_of(&state, "covered");
        js(&session, "document.getElementById('overlay').style.display = 'block'").await;
        let r = run(&session, click(covered)).await;
        assert!(ok(&r).contains("JavaScript"), "{r:?}");
        assert_eq!(js(&session, "window.coveredClicks").await, 1);
        // the click reaches the server
        let before = srv.hits.count("submit?");
        ok(&run(&session, Action::Input(InputParams { index: index_of(&state, "user"), text: "carol".into(), clear: true })).await);
        ok(&run(&session, click(index_of(&state, "submit"))).await);
        eventually("submit hit", || async { srv.hits.count("submit?user=carol") > 0 }).await;
        assert!(srv.hits.count("submit?") > before);
        // shadow DOM button
        ok(&run(&session, click(index_of(&state, "shadow-btn"))).await);
        assert_eq!(js(&session, "document.getElementById('fancy').shadowRoot.getElementById('shadow-count').textContent").await, "1");
        // cross-origin iframe button: its own target
        let inner = state.selector_map.values().find(|e| e.attr("id") == Some("inner-btn")).expect("iframe button indexed").clone();
        assert_ne!(inner.target_id, session.focused_target().await.expect("focused"), "iframe is its own target");
        let hits_before = srv.hits.count("inner");
        let r = run(&session, click(inner.index)).await;
        assert!(!ok(&r).contains("JavaScript"), "a real mouse click inside the OOPIF: {r:?}");
        eventually("iframe hit", || async { srv.hits.count("inner") > hits_before }).await;
        // typing into an input of the cross-origin iframe
        let inner_input = index_of(&state, "inner-input");
        ok(&run(&session, Action::Input(InputParams { index: inner_input, text: "in frame".into(), clear: true })).await);
        let raw = session
            .cdp(Some(&inner.target_id), "Runtime.evaluate", serde_json::json!({"expression": "document.getElementById('inner-input').value", "returnByValue": true}))
            .await
            .expect("evaluate in frame");
        let v: Value = serde_json::from_str(raw.as_str()).expect("json");
        assert_eq!(v["result"]["result"]["value"], "in frame");
        // coordinate click on the shadow button
        let shadow = state.selector_map.values().find(|e| e.attr("id") == Some("shadow-btn")).expect("shadow");
        let _ = shadow;
        let rect = js(&session, "(() => { const r = document.getElementById('fancy').shadowRoot.getElementById('shadow-btn').getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()").await;
        let (x, y) = (rect[0].as_f64().expect("x"), rect[1].as_f64().expect("y"));
        ok(&run(&session, Action::Click(ClickParams { index: None, coordinate_x: Some(x), coordinate_y: Some(y) })).await);
        assert_eq!(js(&session, "document.getElementById('fancy').shadowRoot.getElementById('shadow-count').textContent").await, "2");
        // the same point read off a screenshot the model got scaled to 1280×720
        let scaled = ActionContext { llm_screenshot_size: Some((1280.0, 720.0)), ..ctx() };
        let at = Action::Click(ClickParams { index: None, coordinate_x: Some(x * 1280.0 / 1920.0), coordinate_y: Some(y * 720.0 / 1080.0) });
        ok(&session.execute(&at, &scaled).await);
        assert_eq!(js(&session, "document.getElementById('fancy').shadowRoot.getElementById('shadow-count').textContent").await, "3");
        // clicking a file input is refused
        let r = run(&session, click(index_of(&state, "file"))).await;
        assert!(err(&r).contains("upload_file"), "{r:?}");
        session.release().await;
    });
}

#[test]
fn dropdowns_native_and_aria() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let (session, state) = open_form(&guard).await;
        let color = index_of(&state, "color");
        let r = run(
            &session,
            Action::DropdownOptions(IndexParams { index: color }),
        )
        .await;
        let text = ok(&r);
        assert!(
            text.contains("text=\"Green\"") && text.contains("value=\"g\""),
            "{text}"
        );
        assert!(r.include_extracted_content_only_once);
        // clicking a select lists its options instead
        let r = run(
            &session,
            Action::Click(ClickParams {
                index: Some(color),
                coordinate_x: None,
                coordinate_y: None,
            }),
        )
        .await;
        assert!(ok(&r).contains("Blue"), "{r:?}");
        ok(&run(
            &session,
            Action::SelectDropdown(SelectDropdownParams {
                index: color,
                text: "Blue".into(),
            }),
        )
        .await);
        assert_eq!(
            js(&session, "document.getElementById('color').value").await,
            "b"
        );
        ok(&run(
            &session,
            Action::SelectDropdown(SelectDropdownParams {
                index: color,
                text: "g".into(),
            }),
        )
        .await);
        assert_eq!(
            js(&session, "document.getElementById('color').value").await,
            "g"
        );
        let r = run(
            &session,
            Action::SelectDropdown(SelectDropdownParams {
                index: color,
                text: "Purple".into(),
            }),
        )
        .await;
        assert!(err(&r).contains("Red | Green | Blue"), "{r:?}");
        // ARIA combobox with aria-controls listbox
        let combo = index_of(&state, "combo");
        let r = run(
            &session,
            Action::DropdownOptions(IndexParams { index: combo }),
        )
        .await;
        assert!(ok(&r).contains("Pear"), "{r:?}");
        ok(&run(
            &session,
            Action::SelectDropdown(SelectDropdownParams {
                index: combo,
                text: "Pear".into(),
            }),
        )
        .await);
        assert_eq!(
            js(
                &session,
                "document.getElementById('fruit-choice').textContent"
            )
            .await,
            "pear"
        );
        session.release().await;
    });
}

/// `[innerWidth, innerHeight, width of the vertical scrollbar]` of the focused tab, on a page
/// made taller than the viewport.
async fn viewport_and_scrollbar(session: &BrowserSession) -> Value {
    js(
        session,
        "document.body.style.minHeight = '5000px'; \
         [innerWidth, innerHeight, innerWidth - document.documentElement.clientWidth]",
    )
    .await
}

#[test]
fn viewport_on_every_tab_with_scrollbars() {
    let guard = support::shared_pool();
    rt().block_on(async {
        // The pool's default: browser-use's 1920×1080, scrollbars taking layout width.
        let (session, _) = open_form(&guard).await;
        let [w, h, bar] =
            serde_json::from_value::<[f64; 3]>(viewport_and_scrollbar(&session).await)
                .expect("numbers");
        assert_eq!((w, h), (1920.0, 1080.0));
        assert!(
            bar > 0.0,
            "scrollbars must be visible (take width), got {bar}"
        );
        session.release().await;

        // A task's own viewport, on its first tab and on a tab the page opens.
        let srv = server().await;
        let session = guard
            .pool()
            .lease_with(ContextOptions {
                viewport: Some(Viewport::new(1000, 700)),
                ..ContextOptions::default()
            })
            .await
            .expect("lease");
        assert_eq!(session.emulated_viewport(), Viewport::new(1000, 700));
        session
            .navigate(&url("/actions/form.html", srv.addr))
            .await
            .expect("navigate");
        assert_eq!(
            js(&session, "[innerWidth, innerHeight]").await,
            serde_json::json!([1000, 700])
        );
        let state = capture(&session).await;
        // The page scrolls: its layout viewport is the width minus the scrollbar (15 px).
        assert_eq!(
            (
                state.page_info.viewport_width,
                state.page_info.viewport_height
            ),
            (985, 700),
            "{:?}",
            state.page_info
        );
        let r = run(
            &session,
            Action::Click(ClickParams {
                index: Some(index_of(&state, "newtab")),
                coordinate_x: None,
                coordinate_y: None,
            }),
        )
        .await;
        assert!(ok(&r).contains("tab_id"), "{r:?}");
        assert_eq!(
            js(&session, "[innerWidth, innerHeight]").await,
            serde_json::json!([1000, 700])
        );
        session.release().await;
    });
}

#[test]
fn navigation_history_tabs_and_popups() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let srv = server().await;
        let (session, state) = open_form(&guard).await;
        let form_url = url("/actions/form.html", srv.addr);
        let second = url("/actions/second.html", srv.addr);
        // a link click navigates and waits for the load
        let r = run(
            &session,
            Action::Click(ClickParams {
                index: Some(index_of(&state, "nav")),
                coordinate_x: None,
                coordinate_y: None,
            }),
        )
        .await;
        ok(&r);
        assert_eq!(js(&session, "location.href").await, second.as_str());
        assert_eq!(js(&session, "document.readyState").await, "complete");
        let r = run(&session, Action::GoBack(NoParams::default())).await;
        assert!(ok(&r).contains("form.html"), "{r:?}");
        assert_eq!(js(&session, "location.href").await, form_url.as_str());
        let r = run(
            &session,
            Action::Navigate(NavigateParams {
                url: second.clone(),
                new_tab: false,
            }),
        )
        .await;
        ok(&r);
        assert_eq!(js(&session, "document.title").await, "Second");
        // new tab via navigate
        let r = run(
            &session,
            Action::Navigate(NavigateParams {
                url: form_url.clone(),
                new_tab: true,
            }),
        )
        .await;
        ok(&r);
        let tabs = session.tabs().await.expect("tabs");
        assert_eq!(tabs.len(), 2);
        let first_tab = tabs
            .iter()
            .find(|t| t.url == second)
            .expect("first tab")
            .tab_id
            .clone();
        assert_eq!(js(&session, "location.href").await, form_url.as_str());
        // a link with target=_blank opens a tab: the click switches to it
        let state = capture(&session).await;
        let r = run(
            &session,
            Action::Click(ClickParams {
                index: Some(index_of(&state, "newtab")),
                coordinate_x: None,
                coordinate_y: None,
            }),
        )
        .await;
        assert!(ok(&r).contains("tab_id"), "{r:?}");
        eventually("popup load", || async {
            js(&session, "document.readyState").await == "complete"
        })
        .await;
        assert_eq!(js(&session, "location.search").await, "?popup=1");
        let page = capture(&session).await;
        assert_eq!(page.tabs.len(), 3, "{:?}", page.tabs);
        // switch by short id, close, unknown ids
        let r = run(
            &session,
            Action::Switch(TabParams {
                tab_id: first_tab.clone(),
            }),
        )
        .await;
        ok(&r);
        assert_eq!(js(&session, "location.href").await, second.as_str());
        let bad = run(
            &session,
            Action::Switch(TabParams {
                tab_id: "zzzz".into(),
            }),
        )
        .await;
        assert!(err(&bad).contains("zzzz"));
        ok(&run(
            &session,
            Action::Close(TabParams {
                tab_id: first_tab.clone(),
            }),
        )
        .await);
        assert_eq!(session.tabs().await.expect("tabs").len(), 2);
        ok(&run(&session, Action::Close(TabParams { tab_id: first_tab })).await);
        // the page closes its own (focused) tab: the next action works on the remaining one
        let popup = session
            .tabs()
            .await
            .expect("tabs")
            .into_iter()
            .find(|t| t.url.ends_with("?popup=1"))
            .expect("popup tab");
        ok(&run(
            &session,
            Action::Switch(TabParams {
                tab_id: popup.tab_id.clone(),
            }),
        )
        .await);
        let before = session.focused_target().await.expect("focused");
        assert_eq!(before, popup.target_id);
        js(&session, "window.close(); 1").await;
        eventually("tab closed by the page", || async {
            session.tabs().await.expect("tabs").len() == 1
        })
        .await;
        let r = run(
            &session,
            Action::Evaluate(EvaluateParams {
                code: "location.pathname".into(),
            }),
        )
        .await;
        ok(&r);
        assert_ne!(session.focused_target().await.expect("focused"), before);
        // wait action
        let started = std::time::Instant::now();
        ok(&run(&session, Action::Wait(WaitParams { seconds: 2 })).await);
        assert!(started.elapsed() >= Duration::from_millis(900));
        // a dead port is a navigation error
        let r = run(
            &session,
            Action::Navigate(NavigateParams {
                url: "http://127.0.0.1:9/".into(),
                new_tab: false,
            }),
        )
        .await;
        assert!(err(&r).contains("site unavailable"), "{r:?}");
        session.release().await;
    });
}

#[test]
fn dialogs_are_closed_and_reported() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let (session, state) = open_form(&guard).await;
        let click = |index| {
            Action::Click(ClickParams {
                index: Some(index),
                coordinate_x: None,
                coordinate_y: None,
            })
        };
        let r = run(&session, click(index_of(&state, "alert"))).await;
        assert!(ok(&r).contains("[alert] hello from alert"), "{r:?}");
        assert_eq!(
            js(&session, "document.getElementById('status').textContent").await,
            "after alert"
        );
        let r = run(&session, click(index_of(&state, "confirm"))).await;
        assert!(ok(&r).contains("[confirm] Sure?"), "{r:?}");
        assert_eq!(
            js(&session, "document.getElementById('status').textContent").await,
            "confirm=true"
        );
        let r = run(&session, click(index_of(&state, "prompt"))).await;
        assert!(ok(&r).contains("[prompt] Name?"), "{r:?}");
        assert_eq!(
            js(&session, "document.getElementById('status').textContent").await,
            "prompt=null"
        );
        // a dialog opened outside an action shows up in the next page state
        js(&session, "setTimeout(() => alert('late one'), 0); 1").await;
        eventually("late dialog", || async { js(&session, "1").await == 1 }).await;
        let mut seen = false;
        for _ in 0..50 {
            let page = capture(&session).await;
            if page
                .closed_popup_messages
                .iter()
                .any(|m| m == "[alert] late one")
            {
                seen = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(seen, "late alert not reported");
        // beforeunload (armed after a user gesture) is accepted: the navigation goes through
        js(&session, "window.addEventListener('beforeunload', e => { e.preventDefault(); e.returnValue = 'leave?'; }); 1").await;
        let state = capture(&session).await;
        ok(&run(&session, click(index_of(&state, "agree"))).await);
        let srv = server().await;
        let r = run(&session, Action::Navigate(NavigateParams { url: url("/actions/second.html", srv.addr), new_tab: false })).await;
        ok(&r);
        eventually("navigation after beforeunload", || async { js(&session, "document.title").await == "Second" }).await;
        let text = format!("{:?}", r);
        assert!(text.contains("[beforeunload]") || capture(&session).await.closed_popup_messages.iter().any(|m| m.starts_with("[beforeunload]")), "{text}");
        session.release().await;
    });
}

#[test]
fn download_and_upload_use_the_workspace() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let (session, state) = open_form(&guard).await;
        let click = run(
            &session,
            Action::Click(ClickParams {
                index: Some(index_of(&state, "dl")),
                coordinate_x: None,
                coordinate_y: None,
            }),
        )
        .await;
        let click_text = ok(&click).to_owned();
        eventually("download", || async {
            session
                .downloads()
                .iter()
                .any(|d| d.state == DownloadState::Completed)
        })
        .await;
        let download = session
            .downloads()
            .into_iter()
            .find(|d| d.state == DownloadState::Completed)
            .expect("done");
        let path = download.path.expect("path");
        assert!(
            path.starts_with(session.workspace().downloads_dir()),
            "{path:?}"
        );
        assert_eq!(
            path.file_name().and_then(|n| n.to_str()),
            Some("report.txt")
        );
        assert_eq!(
            std::fs::read_to_string(&path).expect("read"),
            "hello download"
        );
        // the click's result or the next one lists it
        let r = run(
            &session,
            Action::Scroll(ScrollParams {
                down: true,
                pages: 0.1,
                index: None,
            }),
        )
        .await;
        let reported = format!("{click_text}\n{}", ok(&r));
        assert_eq!(
            reported.matches("Downloaded files:").count(),
            1,
            "{reported}"
        );
        assert!(reported.contains("report.txt"), "{reported}");
        // upload: a downloaded file is usable, an arbitrary path is not
        let file = index_of(&state, "file");
        let r = run(
            &session,
            Action::UploadFile(UploadFileParams {
                index: file,
                path: "/etc/passwd".into(),
            }),
        )
        .await;
        assert!(err(&r).contains("not available"), "{r:?}");
        assert_eq!(
            js(&session, "document.getElementById('filename').textContent").await,
            "no file"
        );
        ok(&run(
            &session,
            Action::UploadFile(UploadFileParams {
                index: file,
                path: path.to_string_lossy().into_owned(),
            }),
        )
        .await);
        assert_eq!(
            js(&session, "document.getElementById('filename').textContent").await,
            "report.txt"
        );
        // a workspace file, through a nearby element (the file name span)
        std::fs::write(session.workspace().root().join("notes.txt"), "n\n").expect("write");
        ok(&run(
            &session,
            Action::UploadFile(UploadFileParams {
                index: file,
                path: "notes.txt".into(),
            }),
        )
        .await);
        assert_eq!(
            js(&session, "document.getElementById('filename').textContent").await,
            "notes.txt"
        );
        // an allow-listed outside file
        let outside = tempfile::NamedTempFile::new().expect("tmp");
        std::fs::write(outside.path(), "x").expect("write");
        let allowed = ActionContext {
            available_file_paths: vec![outside.path().to_path_buf()],
            ..ActionContext::default()
        };
        let r = session
            .execute(
                &Action::UploadFile(UploadFileParams {
                    index: file,
                    path: outside.path().to_string_lossy().into_owned(),
                }),
                &allowed,
            )
            .await;
        ok(&r);
        session.release().await;
    });
}

#[test]
fn scrolls_page_and_container() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let (session, state) = open_form(&guard).await;
        let vh = js(&session, "innerHeight").await.as_f64().expect("vh");
        ok(&run(
            &session,
            Action::Scroll(ScrollParams {
                down: true,
                pages: 1.0,
                index: None,
            }),
        )
        .await);
        let y = js(&session, "scrollY").await.as_f64().expect("y");
        assert!((y - vh).abs() <= 2.0, "scrollY {y} vs viewport {vh}");
        ok(&run(
            &session,
            Action::Scroll(ScrollParams {
                down: false,
                pages: 0.5,
                index: None,
            }),
        )
        .await);
        let y2 = js(&session, "scrollY").await.as_f64().expect("y");
        assert!((y2 - vh / 2.0).abs() <= 2.0, "scrollY {y2}");
        let r = run(
            &session,
            Action::Scroll(ScrollParams {
                down: true,
                pages: 0.5,
                index: Some(index_of(&state, "box")),
            }),
        )
        .await;
        assert!(ok(&r).contains("div#box"), "{r:?}");
        assert!(
            js(&session, "document.getElementById('box').scrollTop")
                .await
                .as_f64()
                .expect("top")
                >= 49.0
        );
        ok(&run(
            &session,
            Action::FindText(FindTextParams {
                text: "Bottom marker".into(),
            }),
        )
        .await);
        // The marker (below a 2500 px block) is now in view.
        assert_eq!(
            js(
                &session,
                "(() => { const r = document.getElementById('bottom').getBoundingClientRect(); return scrollY > 1000 && r.top >= 0 && r.bottom <= innerHeight; })()"
            )
            .await,
            Value::Bool(true)
        );
        let r = run(
            &session,
            Action::FindText(FindTextParams {
                text: "no such text anywhere".into(),
            }),
        )
        .await;
        assert!(ok(&r).contains("not found"));
        session.release().await;
    });
}

#[test]
fn page_reading_actions() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let srv = server().await;
        let (session, _) = open_form(&guard).await;
        let r = run(
            &session,
            Action::Extract(ExtractParams {
                query: "what is on the page".into(),
                extract_links: false,
                extract_images: false,
                start_from_char: 0,
                already_collected: vec![],
            }),
        )
        .await;
        let text = ok(&r);
        assert!(
            text.contains("# Login") && text.contains("Second page"),
            "{text}"
        );
        assert!(
            !text.contains("/actions/second.html"),
            "links must be stripped: {text}"
        );
        assert!(r.metadata.as_ref().is_some_and(|m| {
            m["extraction"]["markdown"]
                .as_str()
                .is_some_and(|m| m.contains("Bottom marker"))
        }));
        let r = run(
            &session,
            Action::Extract(ExtractParams {
                query: "links".into(),
                extract_links: true,
                extract_images: false,
                start_from_char: 0,
                already_collected: vec![],
            }),
        )
        .await;
        assert!(
            ok(&r).contains(&format!("({})", url("/actions/second.html", srv.addr))),
            "{r:?}"
        );
        let r = run(
            &session,
            Action::SearchPage(SearchPageParams {
                pattern: "marker".into(),
                regex: false,
                case_sensitive: false,
                context_chars: 20,
                css_scope: None,
                max_results: 25,
            }),
        )
        .await;
        assert!(ok(&r).starts_with("Found 1 matches"), "{r:?}");
        assert!(ok(&r).contains("p#bottom"), "{r:?}");
        let r = run(
            &session,
            Action::SearchPage(SearchPageParams {
                pattern: "[".into(),
                regex: true,
                case_sensitive: false,
                context_chars: 20,
                css_scope: None,
                max_results: 25,
            }),
        )
        .await;
        assert!(err(&r).contains("invalid regex"));
        let r = run(
            &session,
            Action::FindElements(FindElementsParams {
                selector: "#color option".into(),
                attributes: Some(vec!["value".into()]),
                max_results: 50,
                include_text: true,
            }),
        )
        .await;
        let text = ok(&r);
        assert!(
            text.starts_with("Found 3 elements")
                && text.contains("<option> \"Green\" {value=\"g\"}"),
            "{text}"
        );
        let r = run(
            &session,
            Action::FindElements(FindElementsParams {
                selector: "##".into(),
                attributes: None,
                max_results: 50,
                include_text: true,
            }),
        )
        .await;
        assert!(err(&r).contains("selector"));
        // evaluate
        assert_eq!(
            ok(&run(
                &session,
                Action::Evaluate(EvaluateParams {
                    code: "1 + 2".into()
                })
            )
            .await),
            "3"
        );
        assert_eq!(
            ok(&run(
                &session,
                Action::Evaluate(EvaluateParams {
                    code: "new Promise(r => setTimeout(() => r({a: [1]}), 10))".into()
                })
            )
            .await),
            "{\"a\":[1]}"
        );
        let r = run(
            &session,
            Action::Evaluate(EvaluateParams {
                code: "throw new Error('boom')".into(),
            }),
        )
        .await;
        assert!(err(&r).contains("boom"));
        let r = run(
            &session,
            Action::Evaluate(EvaluateParams {
                code: "'x'.repeat(50000)".into(),
            }),
        )
        .await;
        assert!(
            ok(&r).contains("truncated")
                && ok(&r).len() < 21_000
                && r.include_extracted_content_only_once
        );
        // screenshot and pdf into the workspace
        let r = run(
            &session,
            Action::Screenshot(ScreenshotParams {
                file_name: Some("shot".into()),
            }),
        )
        .await;
        ok(&r);
        let png = std::fs::read(&r.attachments.as_ref().expect("attachment")[0]).expect("png");
        assert_eq!(&png[..4], b"\x89PNG");
        let r = run(
            &session,
            Action::Screenshot(ScreenshotParams { file_name: None }),
        )
        .await;
        assert_eq!(
            r.metadata.as_ref().expect("meta")["include_screenshot"],
            true
        );
        let r = run(
            &session,
            Action::SaveAsPdf(SaveAsPdfParams {
                file_name: Some("page".into()),
                print_background: true,
                landscape: false,
                scale: 1.0,
                paper_format: PaperFormat::A4,
                display_header_footer: false,
                header_template: None,
                footer_template: None,
            }),
        )
        .await;
        ok(&r);
        let pdf_path = r.attachments.as_ref().expect("attachment")[0].clone();
        assert!(pdf_path.ends_with("page.pdf"));
        assert_eq!(&std::fs::read(&pdf_path).expect("pdf")[..4], b"%PDF");
        session.release().await;
    });
}

#[test]
fn done_attaches_workspace_files() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let session = guard.pool().lease().await.expect("lease");
        std::fs::write(session.workspace().root().join("todo.md"), "- a\n").expect("write");
        let r = run(
            &session,
            Action::Done(DoneParams {
                text: "finished".into(),
                success: true,
                files_to_display: vec!["todo.md".into()],
            }),
        )
        .await;
        assert!(r.is_done && r.success == Some(true));
        assert!(r.attachments.as_ref().expect("attachments")[0].ends_with("todo.md"));
        for missing in ["missing.md", "../escape.md", "/etc/hostname"] {
            let r = run(
                &session,
                Action::Done(DoneParams {
                    text: "x".into(),
                    success: false,
                    files_to_display: vec![missing.into()],
                }),
            )
            .await;
            assert!(r.error.is_some(), "{missing} must be refused: {r:?}");
        }
        session.release().await;
    });
}

async fn lease_guarded(guard: &support::PoolGuard, settings: EgressSettings) -> BrowserSession {
    guard
        .pool()
        .lease_with(ContextOptions {
            egress: Some(settings),
            ..ContextOptions::default()
        })
        .await
        .expect("lease with egress")
}

#[test]
fn egress_policy_through_actions() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let srv = server().await;
        let second = url("/actions/second.html", srv.addr);
        // default settings: loopback is blocked before anything is sent
        let session = lease_guarded(&guard, EgressSettings::default()).await;
        let hits = srv.hits.all().len();
        let r = run(
            &session,
            Action::Navigate(NavigateParams {
                url: second.clone(),
                new_tab: false,
            }),
        )
        .await;
        assert!(err(&r).contains("not allowed"), "{r:?}");
        let r = run(
            &session,
            Action::Navigate(NavigateParams {
                url: "http://169.254.169.254/latest/meta-data/".into(),
                new_tab: true,
            }),
        )
        .await;
        assert!(err(&r).contains("not allowed"), "{r:?}");
        let r = run(
            &session,
            Action::Navigate(NavigateParams {
                url: "http://0xa9fea9fe/".into(),
                new_tab: false,
            }),
        )
        .await;
        assert!(err(&r).contains("not allowed"), "{r:?}");
        assert_eq!(srv.hits.all().len(), hits);
        // search builds the engine URL and the policy refuses it when it is not allowed
        let r = run(
            &session,
            Action::Search(SearchParams {
                query: "rust lang".into(),
                engine: SearchEngine::Bing,
            }),
        )
        .await;
        assert!(
            err(&r).contains("https://www.bing.com/search?q=rust+lang"),
            "{r:?}"
        );
        session.release().await;

        // loopback allowed, localhost (the second origin) prohibited
        let settings = EgressSettings {
            allow_loopback: true,
            prohibited_domains: vec!["localhost".into()],
            ..EgressSettings::default()
        };
        let session = lease_guarded(&guard, settings).await;
        ok(&run(
            &session,
            Action::Navigate(NavigateParams {
                url: second.clone(),
                new_tab: false,
            }),
        )
        .await);
        assert_eq!(js(&session, "document.title").await, "Second");
        let localhost = format!("http://localhost:{}/actions/second.html", srv.addr.port());
        let r = run(
            &session,
            Action::Navigate(NavigateParams {
                url: localhost.clone(),
                new_tab: false,
            }),
        )
        .await;
        assert!(err(&r).contains("not allowed"), "{r:?}");
        // redirect from an allowed host to a prohibited one
        let redirects = srv.hits.count("redirect");
        let via = format!("{}?to={}", url("/redirect", srv.addr), localhost);
        let r = run(
            &session,
            Action::Navigate(NavigateParams {
                url: via,
                new_tab: false,
            }),
        )
        .await;
        assert!(err(&r).contains("blocked"), "{r:?}");
        assert_eq!(srv.hits.count("redirect"), redirects + 1);
        assert_ne!(js(&session, "document.title").await, "Second");
        // fetch() and an iframe to the prohibited host are blocked and reported
        let r = run(
            &session,
            Action::Navigate(NavigateParams {
                url: url("/actions/fetcher.html", srv.addr),
                new_tab: false,
            }),
        )
        .await;
        assert!(
            r.extracted_content
                .as_deref()
                .is_some_and(|t| t.contains("Navigated")),
            "{r:?}"
        );
        assert!(
            err(&r).contains("localhost"),
            "the blocked iframe is reported: {r:?}"
        );
        let before = srv.hits.count("leak");
        let code = format!(
            "fetch('http://localhost:{}/hit/leak').then(() => 'sent', () => 'failed')",
            srv.addr.port()
        );
        let r = run(&session, Action::Evaluate(EvaluateParams { code })).await;
        assert_eq!(r.extracted_content.as_deref(), Some("failed"), "{r:?}");
        let blocked = err(&r);
        assert!(
            blocked.contains("/hit/leak") || blocked.contains("localhost"),
            "{r:?}"
        );
        assert_eq!(srv.hits.count("leak"), before);
        // a popup to the prohibited host is closed and reported
        let state = capture(&session).await;
        let r = run(
            &session,
            Action::Click(ClickParams {
                index: Some(index_of(&state, "leak-tab")),
                coordinate_x: None,
                coordinate_y: None,
            }),
        )
        .await;
        assert!(err(&r).contains("localhost"), "{r:?}");
        let tabs = session.tabs().await.expect("tabs");
        assert_eq!(tabs.len(), 1, "{tabs:?} {r:?}");
        assert_eq!(srv.hits.count("popup"), 0);
        session.release().await;
    });
}

#[test]
fn a_download_past_its_cap_is_cancelled_and_reported() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let srv = server().await;
        let session = guard
            .pool()
            .lease_with(ContextOptions {
                download_caps: DownloadCaps {
                    per_file_bytes: 1 << 20,
                    per_task_bytes: 10 << 20,
                },
                ..ContextOptions::default()
            })
            .await
            .expect("lease");
        session
            .navigate(&url("/actions/form.html", srv.addr))
            .await
            .expect("navigate");
        let navigate = start_big_download_until_cancelled(&session, srv.addr).await;
        let next = run(&session, Action::Wait(WaitParams { seconds: 0 })).await;
        let reported = format!(
            "{:?} {:?}",
            navigate.error.unwrap_or_default(),
            next.error.unwrap_or_default()
        );
        assert!(
            reported.contains("Downloads cancelled") && reported.contains("1 MiB allowed per file"),
            "{reported}"
        );
        let left: Vec<_> = std::fs::read_dir(session.workspace().downloads_dir())
            .expect("downloads dir")
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert!(left.is_empty(), "nothing of it is kept: {left:?}");
        session.release().await;
    });
}

/// A context opened ahead of its task (the pool's spare) takes the task's settings when it is
/// bound: its downloads land in the task's own workspace, and the task's download caps apply.
#[test]
fn a_spare_context_downloads_into_its_tasks_workspace_under_its_caps() {
    let guard = support::shared_pool();
    rt().block_on(async {
        let srv = server().await;
        let workspace = tempfile::tempdir().expect("workspace");
        let options = ContextOptions {
            egress: Some(EgressSettings {
                allow_loopback: true,
                ..EgressSettings::default()
            }),
            workspace_dir: Some(workspace.path().join("task")),
            download_caps: DownloadCaps {
                per_file_bytes: 1 << 20,
                per_task_bytes: 10 << 20,
            },
            ..ContextOptions::default()
        };
        // Other tests of this binary may take the spare first: lease until one is ours.
        let mut session = None;
        for _ in 0..10 {
            assert!(
                guard.pool().wait_for_spare(Duration::from_secs(60)).await,
                "the pool keeps a spare"
            );
            let leased = guard
                .pool()
                .lease_with(options.clone())
                .await
                .expect("lease");
            if leased.opened_ahead() {
                session = Some(leased);
                break;
            }
            // Its first capture has the next spare opened.
            leased
                .navigate(&url("/actions/form.html", srv.addr))
                .await
                .expect("navigate");
            capture(&leased).await;
            leased.release().await;
        }
        let session = session.expect("a lease got the spare");
        assert_eq!(session.workspace().root(), workspace.path().join("task"));
        session
            .navigate(&url("/actions/form.html", srv.addr))
            .await
            .expect("navigate");
        let state = capture(&session).await;
        let click = run(
            &session,
            Action::Click(ClickParams {
                index: Some(index_of(&state, "dl")),
                coordinate_x: None,
                coordinate_y: None,
            }),
        )
        .await;
        ok(&click);
        eventually("download", || async {
            session
                .downloads()
                .iter()
                .any(|d| d.state == DownloadState::Completed)
        })
        .await;
        let path = session
            .downloads()
            .into_iter()
            .find_map(|d| d.path)
            .expect("the download's path");
        assert!(path.starts_with(workspace.path().join("task")), "{path:?}");
        assert_eq!(
            std::fs::read_to_string(&path).expect("read"),
            "hello download"
        );

        start_big_download_until_cancelled(&session, srv.addr).await;
        session.release().await;
    });
}

/// Navigates to the fixture server's 3 MiB download and waits until the session's download
/// cap has cancelled it; the navigation's result.
async fn start_big_download_until_cancelled(
    session: &BrowserSession,
    addr: std::net::SocketAddr,
) -> ActionResult {
    let navigate = run(
        session,
        Action::Navigate(NavigateParams {
            url: url("/big-download", addr),
            new_tab: false,
        }),
    )
    .await;
    eventually("the download cap to cancel the big download", || async {
        session
            .downloads()
            .iter()
            .any(|d| d.state == DownloadState::Canceled)
    })
    .await;
    navigate
}

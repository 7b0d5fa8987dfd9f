//! Shared harness for the egress tests: one headless Chromium per test binary, local HTTP
//! servers on 127.0.0.1 that count every hit, and a catch-all proxy ("sink") so that a request
//! the guard failed to stop can never leave the machine (and is counted).
//!
//! Host names: Chromium runs with `--host-resolver-rules` generated from the same
//! [`HostResolver`] the tests give the policy (`*.test → 127.0.0.1`), so `allowed.test`,
//! `other.test` and `evil.test` are distinct sites served by loopback servers, and the domain
//! rules apply by name.

#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, Response, StatusCode, Uri, header};
use browserd_browser::egress::{
    EgressGuard, EgressGuardOptions, EgressPolicy, EgressScope, EgressSettings, HostOverride,
    HostResolver,
};
use chromiumoxide::cdp::browser_protocol::browser::BrowserContextId;
use chromiumoxide::cdp::browser_protocol::target::{
    CreateBrowserContextParams, CreateTargetParams,
};
use chromiumoxide::cdp::js_protocol::runtime::EvaluateParams;
use chromiumoxide::{Browser, BrowserConfig, Page};
use futures::StreamExt;
use tokio::sync::OnceCell;

/// The runtime every test runs on: the browser's handler task lives here for the whole binary.
pub static RT: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
});

static ENV: OnceCell<Env> = OnceCell::const_new();

#[path = "../support/hits.rs"]
mod hits;
pub use hits::Hits;

/// A local fixture server.
pub struct Server {
    pub port: u16,
    pub hits: Arc<Hits>,
}

impl Server {
    /// `http://{host}:{port}{path}`.
    pub fn url(&self, host: &str, path: &str) -> String {
        format!("http://{host}:{}{path}", self.port)
    }
}

pub struct Env {
    pub browser: Browser,
    /// Serves `allowed.test` and `other.test` (and 127.0.0.1 / localhost).
    pub app: Server,
    /// Serves `evil.test`; no test may ever make it count a blocked path.
    pub evil: Server,
    /// The browser's proxy for every destination that is not loopback or `*.test`.
    pub sink: Server,
    _profile: tempfile::TempDir,
}

/// The resolver the tests give their policies; the browser resolves the same way.
pub fn test_resolver() -> HostResolver {
    HostResolver::system(Duration::from_secs(2)).with_override(
        HostOverride::new("*.test", "127.0.0.1".parse().expect("ip")).expect("override"),
    )
}

/// A policy over `settings` that resolves `*.test` like the browser.
pub fn policy(settings: EgressSettings) -> Arc<EgressPolicy> {
    Arc::new(
        EgressPolicy::new(settings)
            .expect("valid settings")
            .with_resolver(test_resolver()),
    )
}

pub async fn env() -> &'static Env {
    ENV.get_or_init(start_env).await
}

async fn start_env() -> Env {
    let app = serve(fixture_router()).await;
    let evil = serve(fixture_router()).await;
    let sink = serve(sink_router()).await;
    let profile = tempfile::tempdir().expect("temp profile dir");
    let rules = test_resolver()
        .chromium_host_resolver_rules()
        .expect("rules");
    // The pool's default Chrome; chromiumoxide's own headless mode (`--headless`, which the
    // headless shell ignores) unless it is the full build.
    // The program itself, not Debian's wrapper script: the exit watcher below kills what was
    // launched, and killing the script would leave Chrome running.
    let chrome = browserd_browser::launch::wrapped_executable(std::path::Path::new(
        browserd_browser::DEFAULT_CHROME_PATH,
    ));
    let mut builder = BrowserConfig::builder().chrome_executable(&chrome);
    if browserd_browser::ChromeBuild::of_executable(&chrome) == browserd_browser::ChromeBuild::Full
    {
        builder = builder.new_headless_mode();
    } else {
        builder = builder.arg("site-per-process");
    }
    let config = builder
        .no_sandbox()
        .user_data_dir(profile.path())
        .viewport(None)
        .window_size(1280, 800)
        .launch_timeout(Duration::from_secs(30))
        .request_timeout(Duration::from_secs(15))
        .args([
            "disable-gpu",
            "disable-quic",
            "no-first-run",
            "disable-background-networking",
            "disable-component-update",
            "disable-sync",
            "disable-dev-shm-usage",
        ])
        .arg(("host-resolver-rules", rules.as_str()))
        .arg((
            "proxy-server",
            format!("http://127.0.0.1:{}", sink.port).as_str(),
        ))
        .arg(("proxy-bypass-list", "*.test"))
        .build()
        .expect("browser config");
    let (mut browser, mut handler) = Browser::launch(config).await.expect("launch chromium");
    // The environment lives in a static that is never dropped: Chrome must still not outlive
    // the test binary.
    if let Some(pid) = browser.get_mut_child().and_then(|c| c.inner.id()) {
        // The watcher runs for the life of the test binary (dropping a Child leaves it running).
        let _ = browserd_browser::pool::kill_when_this_process_exits(
            pid,
            &profile.path().to_string_lossy(),
        );
    }
    tokio::spawn(async move {
        while let Some(event) = handler.next().await {
            if let Err(e) = event {
                eprintln!("chromium handler error: {e}");
                break;
            }
        }
    });
    Env {
        browser,
        app,
        evil,
        sink,
        _profile: profile,
    }
}

async fn serve(router: Router<Arc<Hits>>) -> Server {
    let hits = Arc::new(Hits::default());
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let app = router.with_state(hits.clone());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Server { port, hits }
}

fn fixture_router() -> Router<Arc<Hits>> {
    Router::new().fallback(fixture)
}

fn sink_router() -> Router<Arc<Hits>> {
    Router::new().fallback(sink)
}

async fn sink(State(hits): State<Arc<Hits>>, headers: HeaderMap, uri: Uri) -> StatusCode {
    let host = header_host(&headers);
    hits.push(host, uri.to_string());
    StatusCode::BAD_GATEWAY
}

fn header_host(headers: &HeaderMap) -> String {
    headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("")
        .to_string()
}

fn html(body: String) -> Response<Body> {
    Response::builder()
        .header(header::CONTENT_TYPE, "text/html; charset=utf-8")
        .body(Body::from(body))
        .expect("response")
}

fn attr(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
}

fn js_string(s: &str) -> String {
    serde_json::to_string(s)
        .expect("json")
        .replace("</", "<\\/")
}

async fn fixture(
    State(hits): State<Arc<Hits>>,
    headers: HeaderMap,
    uri: Uri,
    Query(q): Query<HashMap<String, String>>,
) -> Response<Body> {
    let target = uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_default();
    hits.push(header_host(&headers), target);
    let get = |k: &str| q.get(k).cloned().unwrap_or_default();
    let path = uri.path();
    if path.starts_with("/redirect") {
        return Response::builder()
            .status(StatusCode::FOUND)
            .header(header::LOCATION, get("to"))
            .body(Body::empty())
            .expect("response");
    }
    if path.starts_with("/iframe") {
        return html(format!(
            "<!doctype html><title>iframe host</title><iframe id=\"f\" src=\"{}\"></iframe>",
            attr(&get("src"))
        ));
    }
    if path.starts_with("/frame-fetch") {
        // Fetches `ok` first (proves the script ran in this frame), then `bad`.
        return html(format!(
            "<!doctype html><title>frame</title><script>\
             fetch({ok}).then(() => fetch({bad})).catch(() => {{}});\
             </script>",
            ok = js_string(&get("ok")),
            bad = js_string(&get("bad"))
        ));
    }
    if path.starts_with("/worker-page") {
        let worker = format!(
            "/worker.js?ok={}&bad={}",
            url::form_urlencoded::byte_serialize(get("ok").as_bytes()).collect::<String>(),
            url::form_urlencoded::byte_serialize(get("bad").as_bytes()).collect::<String>()
        );
        return html(format!(
            "<!doctype html><title>worker host</title><script>new Worker({});</script>",
            js_string(&worker)
        ));
    }
    if path.starts_with("/worker.js") {
        return Response::builder()
            .header(header::CONTENT_TYPE, "text/javascript")
            .body(Body::from(format!(
                "fetch({ok}).then(() => fetch({bad})).catch(() => {{}});",
                ok = js_string(&get("ok")),
                bad = js_string(&get("bad"))
            )))
            .expect("response");
    }
    if path.starts_with("/many") {
        // A page with `n` subresources (benchmarks): each is a separate request.
        let n: usize = get("n").parse().unwrap_or(20).min(200);
        let tag = attr(&get("tag"));
        let imgs: String = (0..n)
            .map(|i| format!("<img src=\"/asset/{i}?tag={tag}\" width=1 height=1>"))
            .collect();
        return html(format!("<!doctype html><title>many</title>{imgs}"));
    }
    if path.starts_with("/page") {
        return html("<!doctype html><title>page</title><p>ok</p>".to_string());
    }
    Response::builder()
        .header(header::CONTENT_TYPE, "text/plain")
        .header(header::ACCESS_CONTROL_ALLOW_ORIGIN, "*")
        .body(Body::from("hit"))
        .expect("response")
}

/// `?k=v&…` with values URL-encoded.
pub fn query(pairs: &[(&str, &str)]) -> String {
    let mut s = url::form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        s.append_pair(k, v);
    }
    format!("?{}", s.finish())
}

/// A fresh browser context with the guard installed before any page exists, and one page.
pub struct GuardedContext {
    pub context: BrowserContextId,
    pub guard: EgressGuard,
    pub page: Page,
}

impl GuardedContext {
    pub async fn new(env: &Env, policy: Arc<EgressPolicy>) -> Self {
        let context = new_context(env).await;
        let guard = tokio::time::timeout(
            Duration::from_secs(20),
            EgressGuard::attach_to_browser(
                &env.browser,
                EgressScope::Context(context.inner().clone()),
                policy,
                EgressGuardOptions::default(),
            ),
        )
        .await
        .expect("attach in time")
        .expect("attach guard");
        let page = new_page(env, &context).await;
        Self {
            context,
            guard,
            page,
        }
    }

    pub async fn dispose(self, env: &Env) {
        let _ = self.page.close().await;
        self.guard.close().await;
        let _ = tokio::time::timeout(
            Duration::from_secs(10),
            env.browser.dispose_browser_context(self.context),
        )
        .await;
    }
}

pub async fn new_context(env: &Env) -> BrowserContextId {
    tokio::time::timeout(
        Duration::from_secs(30),
        env.browser
            .create_browser_context(CreateBrowserContextParams::default()),
    )
    .await
    .expect("context in time")
    .expect("create context")
}

pub async fn new_page(env: &Env, context: &BrowserContextId) -> Page {
    let params = CreateTargetParams::builder()
        .url("about:blank")
        .browser_context_id(context.clone())
        .build()
        .expect("target params");
    tokio::time::timeout(Duration::from_secs(20), env.browser.new_page(params))
        .await
        .expect("new page in time")
        .expect("new page")
}

/// Navigates and waits for the load (or the failure); the outcome is up to the caller to check.
pub async fn goto(page: &Page, url: &str) -> Result<(), String> {
    match tokio::time::timeout(Duration::from_secs(15), page.goto(url)).await {
        Err(_) => Err("navigation timed out".to_string()),
        Ok(Err(e)) => Err(e.to_string()),
        Ok(Ok(_)) => Ok(()),
    }
}

/// Evaluates `expression` (awaiting promises, with a user gesture) and returns its JSON value.
pub async fn eval(page: &Page, expression: &str) -> serde_json::Value {
    let params = EvaluateParams::builder()
        .expression(expression)
        .await_promise(true)
        .return_by_value(true)
        .user_gesture(true)
        .build()
        .expect("evaluate params");
    let result = tokio::time::timeout(Duration::from_secs(15), page.evaluate_expression(params))
        .await
        .expect("evaluate in time")
        .expect("evaluate");
    result.value().cloned().unwrap_or(serde_json::Value::Null)
}

/// Polls `condition` every 50 ms for up to 10 s.
pub async fn wait_until(mut condition: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if condition() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

//! `SessionBrowser` against real Chromium on a local page: the mapping of capture, actions,
//! markdown and element descriptions, and the shared workspace. One Chrome for the binary,
//! shut down at the end.

use std::sync::Arc;

use axum::response::Html;
use axum::routing::get;
use browserd_agent::{AgentBrowser, MarkdownOptions};
use browserd_browser::egress::EgressSettings;
use browserd_browser::{BrowserPool, ContextOptions, PoolConfig};
use browserd_worker::{SessionBrowser, SessionBrowserOptions, TaskWorkspace};
use regex::Regex;
use serde_json::json;
use tokio::sync::OnceCell;

const PAGE: &str = r#"<!doctype html><html><head><title>Adapter page</title></head><body>
<h1>Catalogue</h1><p>Widgets are <b>great</b>.</p>
<input type="text" name="city" aria-label="City">
<a href="/other">Other page</a>
<script>setTimeout(() => alert("hello from the page"), 0)</script>
</body></html>"#;

static POOL: OnceCell<(BrowserPool, String)> = OnceCell::const_new();

async fn pool_and_url() -> &'static (BrowserPool, String) {
    POOL.get_or_init(|| async {
        let app = axum::Router::new()
            .route("/page", get(|| async { Html(PAGE) }))
            .route(
                "/other",
                get(|| async { Html("<title>Other</title><p>other</p>") }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let pool = BrowserPool::new(PoolConfig::default()).unwrap();
        (pool, format!("http://{addr}/page"))
    })
    .await
}

async fn browser(workspace: &TaskWorkspace) -> SessionBrowser {
    let (pool, _) = pool_and_url().await;
    let session = pool
        .lease_with(ContextOptions {
            egress: Some(EgressSettings {
                allow_loopback: true,
                ..EgressSettings::default()
            }),
            workspace_dir: Some(workspace.dir().to_path_buf()),
            ..ContextOptions::default()
        })
        .await
        .unwrap();
    SessionBrowser::new(session, SessionBrowserOptions::default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capture_execute_and_describe_map_the_browser_crate() {
    let (_, url) = pool_and_url().await;
    let workspace = TaskWorkspace::open(None).unwrap();
    let b = Arc::new(browser(&workspace).await);

    let nav = b.execute("navigate", &json!({"url": url})).await.unwrap();
    assert!(nav.error.is_none(), "{:?}", nav.error);
    let state = b.capture(true).await.unwrap();
    assert_eq!(state.url, *url);
    assert_eq!(state.title, "Adapter page");
    assert_eq!(state.tabs.len(), 1);
    assert_eq!(
        state.current_tab_id.as_deref(),
        Some(state.tabs[0].tab_id.as_str())
    );
    assert_eq!(state.tabs[0].tab_id.len(), 4);
    let shot = state.screenshot.as_ref().expect("screenshot");
    assert_eq!(shot.mime(), "image/jpeg");
    assert!(shot.data.starts_with(&[0xFF, 0xD8]));
    assert!(state.page_info.unwrap().viewport_width > 0);
    assert_eq!(state.page_stats.unwrap().links, 1);
    assert!(state.element_count >= 2);
    let input = Regex::new(r"\[(\d+)\]<input[^\n]*name=city")
        .unwrap()
        .captures(&state.llm_text)
        .and_then(|c| c[1].parse::<u64>().ok())
        .unwrap_or_else(|| panic!("{}", state.llm_text));
    // The alert was closed and reported (with navigate, the capture or the next action).
    let typed = b
        .execute("input", &json!({"index": input, "text": "Paris"}))
        .await
        .unwrap();
    assert!(typed.error.is_none(), "{:?}", typed.error);
    let mentions = |r: &browserd_agent::ActionResult| {
        r.long_term_memory
            .as_deref()
            .is_some_and(|m| m.contains("hello from the page"))
    };
    let dialogs_seen = state
        .closed_dialogs
        .iter()
        .any(|d| d.contains("hello from the page"))
        || mentions(&nav)
        || mentions(&typed);
    assert!(dialogs_seen, "{nav:?} {state:?} {typed:?}");

    let element = b.describe_element(input).await.expect("element");
    assert_eq!(element.node_name, "input");
    assert_eq!(element.attributes["name"], "city");
    assert!(element.bounds.is_some());
    assert!(b.describe_element(999_999).await.is_none());

    let md = b
        .extract_markdown(&MarkdownOptions::default())
        .await
        .unwrap();
    assert_eq!(md.url, *url);
    assert!(
        md.chunk.content.contains("Widgets are **great**"),
        "{}",
        md.chunk.content
    );

    let focus = b.focused_tab().await.unwrap();
    assert_eq!(focus.url, *url);

    // Bad input is an action error the model can read, never a panic or Err.
    let bad = b.execute("input", &json!({"index": "x"})).await.unwrap();
    assert!(bad.error.unwrap().contains("Invalid parameters for input"));
    let unknown = b.execute("teleport", &json!({})).await.unwrap();
    assert!(unknown.error.unwrap().contains("Unknown action"));
    let owned = b
        .execute("write_file", &json!({"file_name": "a.md", "content": "x"}))
        .await
        .unwrap();
    assert!(owned.error.unwrap().contains("handled by the agent"));

    let b = Arc::try_unwrap(b).unwrap();
    b.into_session().release().await;

    pdf_lands_in_the_shared_workspace().await;
    pool_and_url().await.0.shutdown().await;
}

/// One runtime owns the shared Chrome, so the scenarios run inside one test.
async fn pdf_lands_in_the_shared_workspace() {
    let (_, url) = pool_and_url().await;
    let workspace = TaskWorkspace::open(None).unwrap();
    let b = browser(&workspace).await;
    b.execute("navigate", &json!({"url": url})).await.unwrap();
    let pdf = b
        .execute("save_as_pdf", &json!({"file_name": "page"}))
        .await
        .unwrap();
    assert!(pdf.error.is_none(), "{:?}", pdf.error);
    let files: Vec<String> = std::fs::read_dir(workspace.dir())
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    assert!(files.iter().any(|f| f.ends_with(".pdf")), "{files:?}");
    b.into_session().release().await;
}

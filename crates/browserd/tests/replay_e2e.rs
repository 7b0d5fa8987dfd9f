//! `browserd replay`: a task recorded with `browserd run --history-out` (real Chromium, local
//! shop, mock model) is re-run without a model after the shop changed so that every index
//! shifts (a banner, an input and a product inserted before the targets): the replay still
//! types the same search and buys the same product, and its report says which actions had to
//! find their element again and how. With the product gone, the replay fails clearly.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Form, Query, State};
use axum::response::Html;
use axum::routing::{get, post};
use browserd_tests::{MockModel, done_reply, index_of, reply};
use serde_json::{Value, json};

/// The shop as recorded (0), changed so that indices shift (1), without the product (2).
#[derive(Default)]
struct Shop {
    version: AtomicU8,
    searches: Mutex<Vec<String>>,
    orders: Mutex<Vec<String>>,
}

type Shared = Arc<Shop>;

fn page(title: &str, body: &str) -> Html<String> {
    Html(format!(
        "<!doctype html><html><head><title>{title}</title></head><body>{body}</body></html>"
    ))
}

async fn home(State(shop): State<Shared>) -> Html<String> {
    let extra = if shop.version.load(Ordering::SeqCst) > 0 {
        r#"<div class="banner"><p>Winter sale!</p><button type="button">Subscribe</button>
           <input type="email" name="newsletter" placeholder="Your e-mail"></div>"#
    } else {
        ""
    };
    page(
        "Shop",
        &format!(
            r#"{extra}<h1>Cable shop</h1>
            <form action="/search" method="get">
              <input type="text" name="q" placeholder="Search products">
              <button type="submit" id="search">Search</button>
            </form>"#
        ),
    )
}

fn product(sku: &str, name: &str) -> String {
    format!(
        r#"<li><span>{name}</span>
        <form action="/buy" method="post"><input type="hidden" name="sku" value="{sku}">
        <button type="submit">Buy {name}</button></form></li>"#
    )
}

async fn search(
    State(shop): State<Shared>,
    Query(query): Query<HashMap<String, String>>,
) -> Html<String> {
    let q = query.get("q").cloned().unwrap_or_default();
    shop.searches.lock().unwrap().push(q.clone());
    let version = shop.version.load(Ordering::SeqCst);
    let mut items = String::new();
    if version > 0 {
        items.push_str(&product("hdmi-cable", "HDMI cable"));
    }
    if version < 2 {
        items.push_str(&product("usb-cable", "USB cable"));
    }
    items.push_str(&product("usb-hub", "USB hub"));
    page(
        "Results",
        &format!("<h1>Results for {q}</h1><ul>{items}</ul>"),
    )
}

async fn buy(
    State(shop): State<Shared>,
    Form(form): Form<HashMap<String, String>>,
) -> Html<String> {
    let sku = form.get("sku").cloned().unwrap_or_default();
    shop.orders.lock().unwrap().push(sku.clone());
    page(
        "Thanks",
        &format!("<h1>Thank you</h1><p>Order placed: {sku}</p>"),
    )
}

/// Index of the `<button>` whose text (the line below it) is `label`.
fn button_labelled(page: &str, label: &str) -> Option<u64> {
    let lines: Vec<&str> = page.lines().collect();
    let at = lines.iter().position(|l| l.trim() == label)?;
    // New elements are marked `*[index]`.
    let line = lines[..at].last()?.trim().trim_start_matches('*');
    let rest = line.strip_prefix('[')?;
    let (index, tag) = rest.split_once(']')?;
    tag.starts_with("<button")
        .then(|| index.parse().ok())
        .flatten()
}

/// The recording's model: search for "usb cable", buy the USB cable, report.
fn shopper() -> browserd_tests::Brain {
    Arc::new(|page: &str| {
        if let Some(line) = page.lines().find(|l| l.contains("Order placed")) {
            return done_reply(&format!("Bought: {}", line.trim()), true);
        }
        if let Some(index) = button_labelled(page, "Buy USB cable") {
            return reply("buy the USB cable", json!([{"click": {"index": index}}]));
        }
        match (
            index_of(page, "input", "Search products"),
            index_of(page, "button", "id=search"),
        ) {
            (Some(input), Some(button)) => reply(
                "search for the cable",
                json!([
                    {"input": {"index": input, "text": "usb cable", "clear": true}},
                    {"click": {"index": button}}
                ]),
            ),
            _ => done_reply(&format!("lost on:\n{page}"), false),
        }
    })
}

async fn browserd(args: &[&str]) -> std::process::Output {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_browserd"))
        .args(args)
        .env("RUST_LOG", "warn")
        .env_remove("BROWSERD_CONFIG")
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(Duration::from_secs(180), output)
        .await
        .expect("browserd took longer than 3 minutes")
        .expect("spawn browserd")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_task_replays_on_a_changed_page_and_reports_what_was_found_again() {
    let shop: Shared = Arc::default();
    let app = Router::new()
        .route("/", get(home))
        .route("/search", get(search))
        .route("/buy", post(buy))
        .with_state(shop.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let model = MockModel::start(shopper(), Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("history.json");
    let start = format!("http://{addr}/");

    // 1. Record.
    let recorded = tokio::process::Command::new(env!("CARGO_BIN_EXE_browserd"))
        .args(["run", "Buy a USB cable", "--allow-loopback", "--no-vision"])
        .args(["--start-url", &start, "--max-steps", "6"])
        .arg("--history-out")
        .arg(&history)
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
        .output()
        .await
        .unwrap();
    assert!(
        recorded.status.success(),
        "{}",
        String::from_utf8_lossy(&recorded.stderr)
    );
    assert_eq!(*shop.orders.lock().unwrap(), ["usb-cable"]);
    let model_calls = model.requests().len();
    let record: Value = serde_json::from_slice(&std::fs::read(&history).unwrap()).unwrap();
    let clicked = record["history"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|step| {
            step["state"]["interacted_element"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .find(|e| e["ax_name"] == "Buy USB cable")
        .expect("the history describes the clicked button");
    assert!(
        clicked["x_path"].as_str().unwrap().ends_with("button"),
        "{clicked}"
    );
    assert_eq!(
        clicked["element_hash"].as_str().unwrap().len(),
        16,
        "{clicked}"
    );

    // 2. The shop changes: a banner with a button and an input before the search form, a
    //    product before the USB cable. Replay without the model.
    shop.version.store(1, Ordering::SeqCst);
    let report_path = dir.path().join("report.json");
    let replayed = browserd(&[
        "replay",
        history.to_str().unwrap(),
        "--allow-loopback",
        "--report-out",
        report_path.to_str().unwrap(),
    ])
    .await;
    let stderr = String::from_utf8_lossy(&replayed.stderr);
    assert!(replayed.status.success(), "{stderr}");
    assert_eq!(model.requests().len(), model_calls, "no model call");
    assert_eq!(shop.searches.lock().unwrap().last().unwrap(), "usb cable");
    assert_eq!(
        *shop.orders.lock().unwrap(),
        ["usb-cable", "usb-cable"],
        "{stderr}"
    );
    assert!(
        String::from_utf8_lossy(&replayed.stdout).starts_with("Bought: Order placed: usb-cable"),
        "the recorded result is printed"
    );
    let report: Value = serde_json::from_slice(&std::fs::read(&report_path).unwrap()).unwrap();
    let actions = report["actions"].as_array().unwrap();
    let names: Vec<&str> = actions
        .iter()
        .map(|a| a["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["navigate", "input", "click", "click", "done"],
        "{report}"
    );
    assert_eq!(report["success"], true);
    for action in &actions[1..4] {
        assert_eq!(action["outcome"], "ok", "{action}");
        // Inserted elements shifted every index after them: each was found again.
        assert_ne!(action["index"], action["recorded_index"], "{action}");
        assert_eq!(action["matched_by"], "hash", "{action}");
    }
    assert_eq!(actions[4]["outcome"], "skipped");
    assert!(stderr.contains("found again by identity hash"), "{stderr}");

    // 3. The product is gone: the replay stops with a clear error instead of buying another.
    shop.version.store(2, Ordering::SeqCst);
    let failed = browserd(&[
        "replay",
        history.to_str().unwrap(),
        "--allow-loopback",
        "--max-retries",
        "1",
        "--retry-delay-ms",
        "50",
    ])
    .await;
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert_eq!(failed.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("element not found") && stderr.contains("Buy USB cable"),
        "{stderr}"
    );
    assert_eq!(
        shop.orders.lock().unwrap().len(),
        2,
        "nothing else was bought"
    );

    // 4. Not a history: a clear error.
    let bogus = dir.path().join("bogus.json");
    std::fs::write(&bogus, "{\"steps\": []}").unwrap();
    let refused = browserd(&["replay", bogus.to_str().unwrap()]).await;
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("is not an AgentHistory JSON"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}

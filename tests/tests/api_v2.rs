//! browser-use cloud's `/api/v2` with the official Python SDK (browser-use-sdk 3.12.1, pinned
//! in tests/python/v2/requirements.txt), unchanged, against a real `browserd serve`: real
//! Postgres, real Chromium on local pages, only the model mocked. The SDK validates every
//! response with pydantic, so the Python script (tests/python/v2/test_sdk.py) checks the wire
//! shapes as well as the behaviour.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, Query};
use axum::http::{HeaderMap, header};
use axum::response::{Html, IntoResponse};
use axum::routing::get;
use browserd_tests::{
    MockModel, Process, TestDb, create_key, done_reply, index_of, message_texts, python_venv,
    reply, repo_root,
};
use regex::Regex;
use serde_json::json;

/// Pages the model's answers are computed from.
async fn site() -> String {
    let app = Router::new()
        .route(
            "/v2/plain",
            get(|| async { page("Plain", "<p>Nothing to do here.</p>") }),
        )
        .route(
            "/v2/product",
            get(|| async { page("Product", "<p>Product: Widget</p><p>Price: 42</p>") }),
        )
        .route(
            "/v2/wait",
            get(|| async { page("Wait", "<p>Keep waiting.</p>") }),
        )
        .route(
            "/v2/report",
            get(|| async {
                page(
                    "Report",
                    "<p>Write the report.</p><p><a href=\"/v2/report-done\">Continue</a></p>",
                )
            }),
        )
        .route(
            "/v2/report-done",
            get(|| async { page("Report done", "<p>Report written.</p>") }),
        )
        .route("/v2/stairs/{n}", get(stairs))
        .route("/v2/cookie", get(cookie));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

fn page(title: &str, body: &str) -> Html<String> {
    Html(format!(
        "<!doctype html><html><head><title>{title}</title></head><body>{body}</body></html>"
    ))
}

async fn stairs(Path(n): Path<u32>, Query(query): Query<HashMap<String, String>>) -> Html<String> {
    let top: u32 = query.get("top").and_then(|t| t.parse().ok()).unwrap_or(3);
    if n >= top {
        return page(
            &format!("Stair {n}"),
            &format!("<p>Top reached: CODE{top}X</p>"),
        );
    }
    page(
        &format!("Stair {n}"),
        &format!(
            "<h1>Stair {n} of {top}</h1><p><a href=\"/v2/stairs/{}?top={top}\">Next</a></p>",
            n + 1
        ),
    )
}

/// Sets a session cookie on the first visit; shows it on a visit that sends it back.
async fn cookie(headers: HeaderMap) -> impl IntoResponse {
    let sent = headers
        .get(header::COOKIE)
        .and_then(|v| v.to_str().ok())
        .and_then(|c| {
            c.split(';')
                .filter_map(|p| p.trim().strip_prefix("v2sid="))
                .next()
                .map(str::to_owned)
        });
    match sent {
        Some(value) => {
            page("Cookie", &format!("<p>Cookie already there: {value}</p>")).into_response()
        }
        None => (
            [(
                header::SET_COOKIE,
                "v2sid=v2-cookie-value; Path=/; HttpOnly",
            )],
            page("Cookie", "<p>Cookie set.</p>"),
        )
            .into_response(),
    }
}

fn brain() -> browserd_tests::Brain {
    let top = Regex::new(r"Top reached: (\w+)").unwrap();
    let cookie = Regex::new(r"Cookie already there: ([\w-]+)").unwrap();
    Arc::new(move |page: &str| {
        if let Some(c) = cookie.captures(page) {
            return done_reply(&format!("cookie={}", &c[1]), true);
        }
        if page.contains("Cookie set.") {
            return done_reply("cookie set", true);
        }
        if page.contains("Product: Widget") {
            return reply(
                "report the product",
                json!([{"done": {"data": {"name": "Widget", "price": 42}, "success": true}}]),
            );
        }
        if page.contains("Keep waiting.") {
            return reply(
                "wait",
                json!([{"write_file": {"file_name": "progress.txt", "content": "still waiting"}},
                       {"wait": {"seconds": 1}}]),
            );
        }
        if page.contains("Write the report.")
            && let Some(index) = index_of(page, "a", r"/>\s*Continue")
        {
            // The secret's placeholder is filled when the action runs: the file on disk holds
            // the value, the stored output file must not.
            return reply(
                "write the report",
                json!([
                    {"write_file": {"file_name": "report.md",
                                    "content": "# Report\nThe token is <secret>token</secret>.",
                                    "trailing_newline": false}},
                    {"write_file": {"file_name": "data.csv", "content": "name,price\nWidget,42"}},
                    {"click": {"index": index}}
                ]),
            );
        }
        if page.contains("Report written.") {
            return done_reply("report written", true);
        }
        if let Some(c) = top.captures(page) {
            return done_reply(&format!("The code at the top is {}", &c[1]), true);
        }
        if let Some(index) = index_of(page, "a", r"/>\s*Next") {
            return reply("climb one stair", json!([{"click": {"index": index}}]));
        }
        if page.contains("Nothing to do here.") {
            return done_reply("plain page read", true);
        }
        done_reply("lost", false)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_sdk_runs_tasks_end_to_end() {
    let python = python_venv("tests/python/v2/requirements.txt");
    let site = site().await;
    let model = MockModel::start(brain(), Duration::from_millis(10)).await;
    let db = TestDb::create().await;
    let server = Process::start(&db, model.addr, "serve", &["--allow-loopback"]).await;
    let key = create_key(&db).await;

    let run = tokio::process::Command::new(&python)
        .arg(repo_root().join("tests/python/v2/test_sdk.py"))
        .env(
            "BROWSERD_V2_URL",
            format!("http://{}/api/v2", server.address()),
        )
        .env("BROWSERD_KEY", &key)
        .env("SITE", &site)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(600), run)
        .await
        .expect("the SDK script ends within 10 minutes")
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("all ok"),
        "SDK script failed ({}):\n{stdout}\n{stderr}\n--- browserd logs ---\n{}",
        output.status,
        server.logs()
    );
    eprintln!("{stdout}");
    for check in [
        "ok client.run",
        "ok tasks.create + wait + steps + status + logs",
        "ok stream",
        "ok structured output with a pydantic model",
        "ok session reuse",
        "ok tasks.stop",
        "ok 401, 404, 422, 501 as BrowserUseError",
        "ok output files",
        "ok profiles.create/get/update/list/delete",
    ] {
        assert!(stdout.contains(check), "missing `{check}` in:\n{stdout}");
    }

    // systemPromptExtension reached the model's system prompt; the SDK key never reached a log.
    let extended = model.requests().iter().any(|r| {
        message_texts(r)
            .first()
            .is_some_and(|s| s.contains("Be brief."))
    });
    assert!(extended, "systemPromptExtension is in the system prompt");
    assert!(!server.logs().contains(&key), "the API key is not logged");

    // The session's cookie is sealed at rest: the cookie's name is nowhere in the database.
    let pool = db.pool().await;
    let sealed: i64 = sqlx::query_scalar(
        "select count(*) from browser_sessions
         where keep_alive and cookies_sealed is not null and cookies = '[]'::jsonb",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(sealed, 1, "the reused session saved its sealed cookies");
    let dump = tokio::process::Command::new("pg_dump")
        .arg("--data-only")
        .arg(&db.url)
        .output()
        .await
        .expect("pg_dump runs");
    assert!(dump.status.success());
    assert!(!String::from_utf8_lossy(&dump.stdout).contains("v2sid"));

    // The secret the agent wrote into report.md is stored as its placeholder.
    let files: Vec<(String, Vec<u8>)> = sqlx::query_as(
        "select file_name, bytes from task_output_files where bytes is not null order by file_name",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let report = files
        .iter()
        .find(|(name, _)| name == "report.md")
        .expect("report.md is stored");
    let report = String::from_utf8_lossy(&report.1);
    assert!(report.contains("<secret>token</secret>"), "{report}");
    for (name, bytes) in &files {
        assert!(
            !String::from_utf8_lossy(bytes).contains("s3cr3t-value-42"),
            "{name} holds the secret value"
        );
    }
}

/// Pixels of `jpeg` within a JPEG's noise of `color`.
fn pixels_near(jpeg: &[u8], color: [u8; 3]) -> usize {
    let image = image::load_from_memory_with_format(jpeg, image::ImageFormat::Jpeg)
        .expect("a JPEG screenshot")
        .into_rgb8();
    image
        .pixels()
        .filter(|p| {
            p.0.iter()
                .zip(color)
                .all(|(a, b)| (i16::from(*a) - i16::from(b)).abs() <= 24)
        })
        .count()
}

/// `highlightElements: true` (v2; `highlight_elements` on /v1) makes the stored step
/// screenshots carry the elements' boxes and index labels: the same page's first step, with
/// and without, differs by the link's highlight colour (browser-use's green for `<a>`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn highlight_elements_marks_the_stored_screenshots() {
    let site = site().await;
    let model = MockModel::start(brain(), Duration::from_millis(10)).await;
    let db = TestDb::create().await;
    let server = Process::start(&db, model.addr, "serve", &["--allow-loopback"]).await;
    let key = create_key(&db).await;
    let client = browserd_tests::Client::new(server.address(), &key);
    let mut shots = Vec::new();
    for highlight in [false, true] {
        let response = client
            .http
            .post(format!("{}/api/v2/tasks", client.base))
            .header("X-Browser-Use-API-Key", &key)
            .json(
                &json!({"task": "Climb", "startUrl": format!("{site}/v2/stairs/1?top=2"),
                          "highlightElements": highlight}),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 202);
        let created: serde_json::Value = response.json().await.unwrap();
        let id = created["id"].as_str().unwrap().to_owned();
        let task = client
            .wait_status(&id, &["finished", "failed"], Duration::from_secs(120))
            .await;
        assert_eq!(task["status"], "finished", "{task}");
        assert_eq!(task["highlight_elements"], highlight, "{task}");
        let (status, content_type, jpeg) = client
            .get_bytes(&format!("/v1/tasks/{id}/steps/1/screenshot"))
            .await;
        assert_eq!((status, content_type.as_str()), (200, "image/jpeg"));
        shots.push(jpeg);
    }
    let link_green = [0x96, 0xCE, 0xB4];
    let (plain, highlighted) = (
        pixels_near(&shots[0], link_green),
        pixels_near(&shots[1], link_green),
    );
    assert!(
        highlighted >= plain + 100,
        "the highlighted screenshot shows the link's box and label: {plain} → {highlighted} green pixels"
    );
}

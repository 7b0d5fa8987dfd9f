//! The worker's download caps, end to end: `browserd serve --download-max-file-mb 1
//! --download-max-task-mb 2` runs a task that downloads a 1.5 MiB file (cancelled: past the
//! per-file cap) and three of 900 KiB (the third cancelled: the task's downloads would pass
//! 2 MiB); the model is told each time, and only the two files that fit are downloaded.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    Router,
    extract::Path,
    http::header,
    response::{Html, IntoResponse},
    routing::get,
};
use browserd_tests::{Scenario, done_reply, index_of, reply, stored_steps};
use serde_json::{Value, json};

const LONG: Duration = Duration::from_secs(120);

const FILES_PAGE: &str = r#"<!doctype html><title>Reports</title><h1>Reports</h1>
<p><a href="/file/archive.bin">Download the archive</a></p>
<p><a href="/file/report-1.bin">Download report 1</a></p>
<p><a href="/file/report-2.bin">Download report 2</a></p>
<p><a href="/file/report-3.bin">Download report 3</a></p>"#;

/// `archive.bin` is 1.5 MiB, the reports 900 KiB each; all served as attachments.
async fn file(Path(name): Path<String>) -> impl IntoResponse {
    let size = if name == "archive.bin" {
        1536 << 10
    } else {
        900 << 10
    };
    (
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{name}\""),
            ),
        ],
        vec![7u8; size],
    )
}

async fn start_site() -> String {
    let app = Router::new()
        .route("/files", get(|| async { Html(FILES_PAGE) }))
        .route("/file/{name}", get(file));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/files")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workers_download_caps_cancel_what_passes_them_and_tell_the_model() {
    // The links in order, one a step (a download does not change the page), then done.
    let next = Arc::new(Mutex::new(0usize));
    let brain: browserd_tests::Brain = Arc::new(move |page: &str| {
        let mut next = next.lock().unwrap();
        let links = [
            "Download the archive",
            "Download report 1",
            "Download report 2",
            "Download report 3",
        ];
        let Some(link) = links.get(*next) else {
            return done_reply("downloaded what fitted", true);
        };
        *next += 1;
        match index_of(page, "a", &format!(r"/>\s*{link}")) {
            Some(i) => reply(link, json!([{"click": {"index": i}}])),
            None => done_reply(&format!("no link {link} in:\n{page}"), false),
        }
    });
    let Scenario {
        client,
        server,
        db: _db,
        ..
    } = Scenario::serve(
        brain,
        Duration::ZERO,
        &["--download-max-file-mb", "1", "--download-max-task-mb", "2"],
        &[],
    )
    .await;
    let url = start_site().await;
    let id = client
        .create_task(json!({"task": "Download the reports", "start_url": url, "max_steps": 8}))
        .await;
    let task = client.wait_status(&id, &["finished", "failed"], LONG).await;
    assert_eq!(task["status"], "finished", "{task}\n{}", server.logs());
    let steps = stored_steps(&client, &id).await;
    let said: Vec<String> = steps
        .iter()
        .flat_map(|s| s["results"].as_array().cloned().unwrap_or_default())
        .map(|r: Value| format!("{} {}", r["error"], r["extracted_content"]))
        .collect();
    let all = said.join("\n");
    assert!(
        all.contains("archive.bin") && all.contains("larger than the 1 MiB allowed per file"),
        "the archive is cancelled by the per-file cap:\n{all}"
    );
    assert!(
        all.contains("report-3.bin") && all.contains("would exceed the 2 MiB allowed per task"),
        "the third report is cancelled by the per-task cap:\n{all}"
    );
    // What finished is reported too (downloads are not output files: the workspace keeps them
    // for the task's own uploads).
    let finished: Vec<&str> = all
        .lines()
        .filter_map(|l| l.split("Downloaded files: ").nth(1))
        .collect();
    let finished = finished.join(", ");
    assert!(
        finished.contains("report-1.bin") && finished.contains("report-2.bin"),
        "the two reports that fit are downloaded: {finished}\n{all}"
    );
    assert!(
        !finished.contains("archive.bin") && !finished.contains("report-3.bin"),
        "the cancelled downloads are not: {finished}"
    );
}

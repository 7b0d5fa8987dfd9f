//! Observability of a whole service: a `browserd serve` process exports the spans of a task
//! over OTLP/HTTP to a receiver in this test process (task → step → capture / model_call /
//! action, joined to the trace of the POST that created the task), its JSON logs carry the
//! trace id, and `/metrics` — on the api's `--metrics-listen` (not its public port) and on a
//! worker's `--metrics-addr` — shows every
//! metric family once a task ran.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use browserd_tests::{Client, MockModel, Process, Site, TestDb, create_key, reply, stairs_brain};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

static ONE_SCENARIO_AT_A_TIME: Semaphore = Semaphore::const_new(1);

const LONG: Duration = Duration::from_secs(90);

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN_ID: &str = "00f067aa0ba902b7";

/// One received span, ids in hex.
#[derive(Clone, Debug)]
struct ReceivedSpan {
    name: String,
    trace_id: String,
    span_id: String,
    parent_span_id: String,
    attributes: BTreeMap<String, String>,
    service: String,
}

impl ReceivedSpan {
    fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

/// An OTLP/HTTP trace receiver (`POST /v1/traces`, protobuf).
struct OtlpReceiver {
    addr: std::net::SocketAddr,
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn any_value(value: Option<&AnyValue>) -> String {
    match value {
        Some(AnyValue::StringValue(s)) => s.clone(),
        Some(AnyValue::BoolValue(b)) => b.to_string(),
        Some(AnyValue::IntValue(i)) => i.to_string(),
        Some(AnyValue::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

async fn receive_traces(
    State(spans): State<Arc<Mutex<Vec<ReceivedSpan>>>>,
    body: Bytes,
) -> ([(&'static str, &'static str); 1], Vec<u8>) {
    let request = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf export");
    let mut received = Vec::new();
    for resource_spans in request.resource_spans {
        let service = resource_spans
            .resource
            .iter()
            .flat_map(|r| r.attributes.iter())
            .find(|kv| kv.key == "service.name")
            .map(|kv| any_value(kv.value.as_ref().and_then(|v| v.value.as_ref())))
            .unwrap_or_default();
        for scope_spans in resource_spans.scope_spans {
            for span in scope_spans.spans {
                received.push(ReceivedSpan {
                    name: span.name,
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    attributes: span
                        .attributes
                        .iter()
                        .map(|kv| {
                            (
                                kv.key.clone(),
                                any_value(kv.value.as_ref().and_then(|v| v.value.as_ref())),
                            )
                        })
                        .collect(),
                    service: service.clone(),
                });
            }
        }
    }
    spans.lock().unwrap().extend(received);
    ([("content-type", "application/x-protobuf")], Vec::new())
}

impl OtlpReceiver {
    async fn start() -> Self {
        let spans = Arc::new(Mutex::new(Vec::new()));
        let app = Router::new()
            .route("/v1/traces", post(receive_traces))
            .with_state(spans.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { addr, spans }
    }

    fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans.lock().unwrap().clone()
    }

    /// Waits until `done` holds for the spans received so far.
    async fn wait_for(&self, done: impl Fn(&[ReceivedSpan]) -> bool) -> Vec<ReceivedSpan> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let spans = self.spans();
            if done(&spans) {
                return spans;
            }
            if tokio::time::Instant::now() > deadline {
                let names: Vec<_> = spans
                    .iter()
                    .map(|s| format!("{} {:?}", s.name, s.attributes))
                    .collect();
                panic!(
                    "the expected spans did not arrive; got:\n{}",
                    names.join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Every family a task run must leave in the exposition.
const FAMILIES: &[&str] = &[
    "browserd_http_requests_total",
    "browserd_http_request_duration_seconds",
    "browserd_tasks",
    "browserd_queue_depth",
    "browserd_queue_oldest_age_seconds",
    "browserd_tasks_claimed_total",
    "browserd_tasks_ended_total",
    "browserd_worker_tasks_running",
    "browserd_step_duration_seconds",
    "browserd_capture_duration_seconds",
    "browserd_action_duration_seconds",
    "browserd_actions_total",
    "browserd_action_errors_total",
    "browserd_model_requests_total",
    "browserd_model_request_duration_seconds",
    "browserd_model_tokens_total",
    "browserd_model_cost_usd_total",
    "browserd_browser_processes",
    "browserd_browser_contexts_in_use",
    "browserd_browser_contexts_capacity",
    "browserd_browser_context_opens_total",
    "browserd_chrome_launches_total",
    "browserd_chrome_crashes_total",
    "browserd_websocket_subscribers",
    "browserd_event_delivery_seconds",
];

fn assert_families(exposition: &str, families: &[&str], what: &str) {
    let missing: Vec<&&str> = families
        .iter()
        .filter(|family| !exposition.contains(&format!("# TYPE {family} ")))
        .collect();
    assert!(
        missing.is_empty(),
        "{what} lacks {missing:?}:\n{exposition}"
    );
}

/// Scrapes `url` until the exposition has every family (the task gauges are refreshed per
/// scrape with a timeout of their own, which a loaded machine can miss), at most 30 s.
async fn scrape(http: &reqwest::Client, url: &str, families: &[&str], what: &str) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let exposition = http.get(url).send().await.unwrap().text().await.unwrap();
        let complete = families
            .iter()
            .all(|family| exposition.contains(&format!("# TYPE {family} ")));
        if complete || tokio::time::Instant::now() >= deadline {
            assert_families(&exposition, families, what);
            return exposition;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The value of the sample `series` (name with labels, as rendered).
fn sample(exposition: &str, series: &str) -> Option<f64> {
    exposition.lines().find_map(|line| {
        line.strip_prefix(series)
            .and_then(|rest| rest.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_run_is_traced_from_its_post_and_measured() {
    let _one = ONE_SCENARIO_AT_A_TIME.acquire().await.unwrap();
    let receiver = OtlpReceiver::start().await;
    let site = Site::start().await;
    // First answer: a click on an index the page does not have (an action error), then the
    // stairs.
    let erred = Arc::new(AtomicBool::new(false));
    let stairs = stairs_brain();
    let brain = Arc::new(move |page: &str| {
        if !erred.swap(true, Ordering::SeqCst) {
            return reply(
                "click a missing element",
                json!([{"click": {"index": 987654}}]),
            );
        }
        stairs(page)
    });
    let model = MockModel::start(brain, Duration::ZERO).await;
    let db = TestDb::create().await;
    let key = create_key(&db).await;
    let endpoint = format!("http://{}", receiver.addr);
    let server = Process::start_with_env(
        &db,
        model.addr,
        "serve",
        &["--allow-loopback"],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_SERVICE_NAME", "browserd-under-test"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            ("BROWSERD_LOG_FORMAT", "json"),
        ],
    )
    .await;
    let client = Client::new(server.address(), &key);

    // Create the task inside the caller's trace.
    let response = client
        .http
        .post(format!("{}/v1/tasks", client.base))
        .bearer_auth(&key)
        .header("traceparent", format!("00-{TRACE_ID}-{CALLER_SPAN_ID}-01"))
        .json(&json!({
            "task": "Climb the stairs and report the code at the top.",
            "start_url": site.url("/stairs/1?top=2"),
            "max_steps": 6,
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 201);
    let created: Value = response.json().await.unwrap();
    let id = created["id"].as_str().unwrap().to_owned();
    // Watched live: the events stored while the socket is open are timed.
    let mut stream = client.events(&id, 0).await;
    let task = client.wait_status(&id, &["finished"], LONG).await;
    assert_eq!(task["is_success"], json!(true), "{task}");
    let mut streamed = 0;
    while let Some(event) = stream.next(LONG).await {
        streamed += 1;
        if event["kind"] == "status" && event["payload"]["status"] == "finished" {
            break;
        }
    }

    // The spans: the POST joins the caller's trace; the task is a child of the POST; steps of
    // the task; capture, model calls and actions of the steps.
    let spans = receiver
        .wait_for(|spans| {
            spans
                .iter()
                .any(|s| s.name == "task" && s.attr("task_id") == Some(id.as_str()))
        })
        .await;
    let post = spans
        .iter()
        .find(|s| s.name == "POST /v1/tasks")
        .unwrap_or_else(|| panic!("no POST span: {spans:#?}"));
    assert_eq!(post.trace_id, TRACE_ID);
    assert_eq!(post.parent_span_id, CALLER_SPAN_ID);
    assert_eq!(post.service, "browserd-under-test");
    let task_span = spans
        .iter()
        .find(|s| s.name == "task" && s.attr("task_id") == Some(id.as_str()))
        .unwrap();
    assert_eq!(task_span.trace_id, TRACE_ID, "{task_span:?}");
    assert_eq!(task_span.parent_span_id, post.span_id, "{task_span:?}");
    assert_eq!(task_span.attr("model"), Some("mock"));
    assert_eq!(task_span.attr("status"), Some("finished"));
    assert_eq!(task_span.attr("attempt"), Some("1"));
    assert_eq!(
        task_span.attr("input_tokens"),
        Some("3000"),
        "{task_span:?}"
    );

    let in_trace: Vec<&ReceivedSpan> = spans.iter().filter(|s| s.trace_id == TRACE_ID).collect();
    let steps: Vec<&ReceivedSpan> = in_trace
        .iter()
        .copied()
        .filter(|s| s.name == "step")
        .collect();
    let mut numbers: Vec<&str> = steps.iter().filter_map(|s| s.attr("step")).collect();
    numbers.sort_unstable();
    // 0: initial navigation; 1: the failing click; 2: click Next; 3: done.
    assert_eq!(numbers, ["0", "1", "2", "3"], "{steps:#?}");
    for step in &steps {
        assert_eq!(step.parent_span_id, task_span.span_id, "{step:?}");
    }
    let step_ids: Vec<&str> = steps.iter().map(|s| s.span_id.as_str()).collect();
    let step_1 = steps.iter().find(|s| s.attr("step") == Some("1")).unwrap();
    assert_eq!(step_1.attr("input_tokens"), Some("1000"), "{step_1:?}");
    assert_eq!(step_1.attr("output_tokens"), Some("50"), "{step_1:?}");
    let children = |name: &str| -> Vec<&ReceivedSpan> {
        in_trace
            .iter()
            .copied()
            .filter(|s| s.name == name || s.name.starts_with(&format!("{name} ")))
            .collect()
    };
    let captures = children("capture");
    assert_eq!(
        captures.len(),
        3,
        "one capture per model step: {captures:#?}"
    );
    let models = children("model_call");
    assert_eq!(models.len(), 3, "{models:#?}");
    for span in captures.iter().chain(&models) {
        assert!(
            step_ids.contains(&span.parent_span_id.as_str()),
            "{span:?} is a child of a step"
        );
    }
    for model_call in &models {
        assert_eq!(model_call.attr("model"), Some("mock"));
        assert_eq!(model_call.attr("answered_by"), Some("mock"));
        assert_eq!(model_call.attr("input_tokens"), Some("1000"));
        assert_eq!(model_call.attr("output_tokens"), Some("50"));
    }
    let actions = children("action");
    let mut names: Vec<&str> = actions.iter().filter_map(|s| s.attr("action")).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        ["click", "click", "done", "navigate"],
        "{actions:#?}"
    );
    for action in &actions {
        assert!(
            step_ids.contains(&action.parent_span_id.as_str()),
            "{action:?}"
        );
    }
    let failed = actions
        .iter()
        .find(|a| a.attr("error_kind").is_some())
        .unwrap_or_else(|| panic!("the missing element is an action error: {actions:#?}"));
    assert_eq!(failed.attr("action"), Some("click"));
    assert_eq!(failed.attr("error_kind"), Some("failed"));

    // JSON logs carry the trace id.
    let logs = server.logs();
    assert!(
        logs.lines()
            .any(|l| l.contains(&format!("\"trace_id\":\"{TRACE_ID}\""))
                && l.contains("task created")),
        "{logs}"
    );

    // Metrics: every family on the metrics listener's /metrics (serve records the worker's there
    // too); the api port does not serve them without --metrics-token.
    let public = client
        .http
        .get(format!("{}/metrics", client.base))
        .send()
        .await
        .unwrap();
    assert_eq!(public.status(), 404, "the api port serves no open /metrics");
    let exposition = scrape(
        &client.http,
        &format!("http://{}/metrics", server.metrics_address()),
        FAMILIES,
        "serve's /metrics",
    )
    .await;
    assert_eq!(
        sample(
            &exposition,
            r#"browserd_tasks_ended_total{status="finished"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &exposition,
            r#"browserd_action_errors_total{action="click",kind="failed"}"#
        ),
        Some(1.0),
        "{exposition}"
    );
    assert_eq!(
        sample(
            &exposition,
            r#"browserd_model_tokens_total{model="mock",kind="input"}"#
        ),
        Some(3000.0)
    );
    assert_eq!(sample(&exposition, "browserd_queue_depth"), Some(0.0));
    assert_eq!(
        sample(
            &exposition,
            r#"browserd_chrome_launches_total{outcome="ok"}"#
        ),
        Some(1.0)
    );
    assert_eq!(sample(&exposition, "browserd_browser_processes"), Some(1.0));
    assert!(exposition.contains("browserd_step_duration_seconds_bucket"));
    let delivered = sample(&exposition, "browserd_event_delivery_seconds_count").unwrap();
    assert!(
        delivered >= 1.0 && delivered <= f64::from(streamed),
        "{delivered} timed deliveries of {streamed} streamed events"
    );

    // A worker alone serves the exposition on --metrics-addr.
    let worker = Process::start(
        &db,
        model.addr,
        "worker",
        &["--metrics-addr", "127.0.0.1:0", "--concurrency", "1"],
    )
    .await;
    let logs = worker.logs();
    let address = regex::Regex::new(r"serving metrics address=(\S+)")
        .unwrap()
        .captures(&logs)
        .unwrap_or_else(|| panic!("{logs}"))[1]
        .to_owned();
    scrape(
        &client.http,
        &format!("http://{address}/metrics"),
        &[
            "browserd_tasks",
            "browserd_queue_depth",
            "browserd_queue_oldest_age_seconds",
            "browserd_worker_tasks_running",
            "browserd_browser_processes",
            "browserd_chrome_crashes_total",
        ],
        "the worker's /metrics",
    )
    .await;
    worker.signal("TERM").await;
    server.signal("TERM").await;
}

/// The Grafana dashboard only queries families browserd exports.
#[test]
fn the_grafana_dashboard_uses_exported_families() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/grafana/browserd.json"
    );
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let names = regex::Regex::new(r"browserd_[a-z_]+").unwrap();
    let mut used = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap();
            for name in names.find_iter(expr) {
                let family = name
                    .as_str()
                    .trim_end_matches("_bucket")
                    .trim_end_matches("_count")
                    .trim_end_matches("_sum");
                assert!(FAMILIES.contains(&family), "{family} in {expr}");
                used += 1;
            }
        }
    }
    assert!(used > 20);
}

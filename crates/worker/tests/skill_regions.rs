//! Element regions and a skill's near matching in real Chromium, on a local page with a table
//! of 200 rows each with an identical "Add to cart" button: `describe_element` records the
//! row's text as the button's region (also inside an iframe), the replay's near matching
//! clicks the row of another value, and a page where two rows show the value is a miss.
//! Also measures what the region costs `describe_element` (printed; see docs/src/benchmarks.md).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use axum::extract::Query;
use axum::response::Html;
use axum::routing::get;
use browserd_agent::replay::{MatchedBy, ReplayOptions, replay};
use browserd_agent::secrets::Secrets;
use browserd_agent::skill::{bind, make_script};
use browserd_agent::{
    ActionCall, AgentBrowser, AgentHistory, AgentHistoryList, AgentOutput, BrowserStateHistory,
    SensitiveData, StepMetadata,
};
use browserd_browser::egress::EgressSettings;
use browserd_browser::{BrowserPool, ContextOptions, PoolConfig};
use browserd_worker::{SessionBrowser, SessionBrowserOptions, TaskWorkspace};
use serde_json::json;

/// 200 rows, orders 1001…1200; `dup` shows order 1017 twice.
fn table(dup: bool) -> String {
    let mut html = String::from(
        "<!doctype html><html><head><title>Orders</title><style>td{padding:0;font:10px sans-serif}\
         button{font:10px sans-serif;padding:0}</style></head><body><h1>Orders</h1><table>",
    );
    for i in 1..=200 {
        let order = if dup && i == 30 { 1017 } else { 1000 + i };
        html.push_str(&format!(
            "<tr><td>Order {order}</td><td>Shirt   no.\n{i}</td>\
             <td><button onclick=\"location.href='/cart?order={order}'\">Add to cart</button></td></tr>"
        ));
    }
    html.push_str("</table></body></html>");
    html
}

const FRAMED: &str = r#"<!doctype html><html><head><title>Framed</title></head><body>
<h1>Outside</h1><iframe style="width:600px;height:300px" srcdoc="<ul><li><span>Order 7</span> <button>Add to cart</button></li><li><span>Order 8</span> <button>Add to cart</button></li></ul>"></iframe>
</body></html>"#;

/// The fixture site and a pool, for one test: each test has its own runtime, and the tasks
/// behind a pool or a server live on the runtime that started them.
async fn site() -> (BrowserPool, String) {
    {
        let app = axum::Router::new()
            .route("/orders", get(|| async { Html(table(false)) }))
            .route("/dup", get(|| async { Html(table(true)) }))
            .route("/framed", get(|| async { Html(FRAMED) }))
            .route(
                "/cart",
                get(|Query(q): Query<BTreeMap<String, String>>| async move {
                    Html(format!(
                        "<title>Cart</title><p>Order {} is in the cart</p>",
                        q.get("order").cloned().unwrap_or_default()
                    ))
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let pool = BrowserPool::new(PoolConfig::default()).unwrap();
        (pool, format!("http://{addr}"))
    }
}

async fn browser(pool: &BrowserPool, workspace: &TaskWorkspace) -> SessionBrowser {
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

/// The indices of the "Add to cart" buttons of the last capture.
async fn buttons(b: &SessionBrowser) -> Vec<u64> {
    b.elements()
        .await
        .into_iter()
        .filter(|e| e.node_name.eq_ignore_ascii_case("button"))
        .map(|e| e.index)
        .collect()
}

/// The recorded run: open the orders, click the button of order 1042, done.
async fn recorded_run(b: &SessionBrowser, base: &str) -> AgentHistoryList {
    let url = format!("{base}/orders");
    let nav = b.execute("navigate", &json!({"url": url})).await.unwrap();
    assert!(nav.error.is_none(), "{:?}", nav.error);
    b.capture(false).await.unwrap();
    let mut chosen = None;
    for index in buttons(b).await {
        let element = b.describe_element(index).await.expect("described");
        if element
            .region
            .as_deref()
            .is_some_and(|r| r.contains("Order 1042 "))
        {
            chosen = Some(element);
            break;
        }
    }
    let chosen = chosen.expect("the row of order 1042 is indexed");
    assert_eq!(
        chosen.region.as_deref(),
        Some("Order 1042 Shirt no. 42 Add to cart"),
        "the row's text, whitespace collapsed"
    );
    assert_eq!(chosen.ax_name.as_deref(), Some("Add to cart"));
    let click = ActionCall::new("click", json!({"index": chosen.index}));
    let step = |number: u32, url: String, action: ActionCall, element| AgentHistory {
        model_output: Some(AgentOutput {
            next_goal: Some(format!("step {number}")),
            action: vec![action],
            ..AgentOutput::default()
        }),
        result: Vec::new(),
        state: BrowserStateHistory {
            url,
            interacted_element: vec![element],
            ..BrowserStateHistory::default()
        },
        metadata: StepMetadata {
            step_number: number,
            ..StepMetadata::default()
        },
        state_message: None,
    };
    AgentHistoryList {
        history: vec![
            step(
                0,
                url.clone(),
                ActionCall::new("navigate", json!({"url": url})),
                None,
            ),
            step(1, url.clone(), click, Some(chosen)),
        ],
        ..AgentHistoryList::default()
    }
}

fn no_secrets() -> Secrets {
    Secrets::new(&SensitiveData::default())
}

fn options() -> ReplayOptions {
    ReplayOptions {
        skip_failures: false,
        max_retries: 0,
        retry_delay: Duration::ZERO,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn near_matching_picks_the_row_of_the_new_value_and_refuses_two() {
    let (pool, base) = site().await;
    let base = &base;
    let workspace = TaskWorkspace::open(None).unwrap();
    let recorder = browser(&pool, &workspace).await;
    let history = recorded_run(&recorder, base).await;
    let values = BTreeMap::from([("order".to_owned(), "1042".to_owned())]);
    let script = make_script(&history, &[], &values);
    let recorded = script.steps.history[1].state.interacted_element[0]
        .clone()
        .unwrap();
    assert_eq!(recorded.near.as_deref(), Some("{{order}}"));
    recorder.into_session().release().await;

    // Proposed-free script: `order` is made a parameter by hand for this test.
    let mut script = script;
    script.parameters = browserd_agent::skill::parse_prompt("{{order=1042}}")
        .unwrap()
        .parameters;
    let (_, steps) = bind(&script, json!({"order": 1017}).as_object().unwrap()).unwrap();

    let b = browser(&pool, &workspace).await;
    let report = replay(&b, &steps, &no_secrets(), &options(), |_| {}).await;
    assert!(report.success, "{report:?}");
    let click = report.actions.iter().find(|a| a.action == "click").unwrap();
    assert_eq!(click.matched_by, Some(MatchedBy::Near));
    let tab = b.focused_tab().await.unwrap();
    assert!(tab.url.ends_with("/cart?order=1017"), "{}", tab.url);
    b.into_session().release().await;

    // Two rows show 1017: a miss, nothing clicked.
    let mut on_dup = steps.clone();
    let dup_url = format!("{base}/dup");
    on_dup.history[0].model_output.as_mut().unwrap().action[0].params["url"] = json!(dup_url);
    let b = browser(&pool, &workspace).await;
    let report = replay(&b, &on_dup, &no_secrets(), &options(), |_| {}).await;
    assert!(!report.success);
    let error = report.error.unwrap_or_default();
    assert!(
        error.contains("2 candidates show \"1017\" (ambiguous)"),
        "{error}"
    );
    assert_eq!(
        b.focused_tab().await.unwrap().url,
        dup_url,
        "nothing clicked"
    );
    b.into_session().release().await;
    pool.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regions_are_computed_in_the_elements_own_frame_and_cost_little() {
    let (pool, base) = site().await;
    let base = &base;
    let workspace = TaskWorkspace::open(None).unwrap();
    let b = browser(&pool, &workspace).await;
    b.execute("navigate", &json!({"url": format!("{base}/framed")}))
        .await
        .unwrap();
    b.capture(false).await.unwrap();
    let framed = buttons(&b).await;
    let regions = b.element_regions(&framed).await;
    assert_eq!(
        regions,
        [
            Some("Order 7 Add to cart".to_owned()),
            Some("Order 8 Add to cart".to_owned())
        ]
    );
    assert_eq!(b.element_regions(&[999_999_999]).await, [None]);

    b.execute("navigate", &json!({"url": format!("{base}/orders")}))
        .await
        .unwrap();
    b.capture(false).await.unwrap();
    let rows = buttons(&b).await;
    assert!(rows.len() >= 40, "{} buttons indexed", rows.len());
    let mut with_region = Vec::new();
    for index in rows.iter().take(40) {
        let t = Instant::now();
        let element = b.describe_element(*index).await.unwrap();
        with_region.push(t.elapsed());
        assert!(element.region.is_some());
    }
    with_region.sort();
    let median = |d: &[Duration]| d[d.len() / 2].as_secs_f64() * 1000.0;
    let t = Instant::now();
    let all = b.element_regions(&rows).await;
    let all_ms = t.elapsed().as_secs_f64() * 1000.0;
    assert!(all.iter().all(Option::is_some));
    println!(
        "describe_element on a 200-row page: median {:.2} ms with the region (max {:.2} ms); \
         element_regions of all {} indexed buttons: {all_ms:.1} ms",
        median(&with_region),
        with_region.last().unwrap().as_secs_f64() * 1000.0,
        rows.len(),
    );
    assert!(median(&with_region) < 250.0, "a region costs little");
    b.into_session().release().await;
    pool.shutdown().await;
}

/// A model answering result functions from a list, counting its calls.
struct Functions(std::sync::Mutex<std::collections::VecDeque<&'static str>>);

#[async_trait::async_trait]
impl browserd_llm::ChatModel for Functions {
    fn name(&self) -> &str {
        "functions"
    }

    async fn complete(
        &self,
        request: &browserd_llm::ChatRequest,
    ) -> Result<browserd_llm::ChatResponse, browserd_llm::LlmError> {
        assert_eq!(request.output_schema.name, "result_reader");
        let function = self.0.lock().unwrap().pop_front().unwrap_or("return 1;");
        Ok(browserd_llm::ChatResponse {
            value: json!({ "function": function }),
            usage: browserd_llm::TokenUsage::default(),
            cost_usd: None,
            latency: Duration::ZERO,
            model: "functions".into(),
            provider_model: "functions".into(),
            stop_reason: None,
        })
    }
}

fn functions(list: &[&'static str]) -> Functions {
    Functions(std::sync::Mutex::new(list.iter().copied().collect()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_script_is_learned_once_and_reads_other_values() {
    use browserd_agent::skill::{ResultReader, learn_result, read_result};
    let (pool, base) = site().await;
    let workspace = TaskWorkspace::open(None).unwrap();
    let b = browser(&pool, &workspace).await;
    b.execute(
        "navigate",
        &json!({"url": format!("{base}/cart?order=1042")}),
    )
    .await
    .unwrap();
    let values = BTreeMap::from([("order".to_owned(), "1042".to_owned())]);
    let final_result = "Order 1042 is in the cart";
    // A first function that reads the wrong thing, then one that reproduces the result.
    let model = functions(&[
        "return document.title;",
        "return document.querySelector('p').innerText;",
    ]);
    let learned = learn_result(&model, &b, "Add the order", final_result, None, &values).await;
    assert_eq!(learned.model_calls, 2, "{learned:?}");
    assert_eq!(learned.note, None);
    assert!(matches!(learned.reader, ResultReader::Script { .. }));

    b.execute(
        "navigate",
        &json!({"url": format!("{base}/cart?order=1017")}),
    )
    .await
    .unwrap();
    let other = BTreeMap::from([("order".to_owned(), "1017".to_owned())]);
    let read = read_result(&b, &learned.reader, &other, None)
        .await
        .unwrap();
    assert_eq!(read, json!("Order 1017 is in the cart"));

    // A structured result is validated: the schema's shape, or an error.
    let schema = json!({"type": "object", "properties": {"order": {"type": "integer"}}, "required": ["order"]});
    let reader = ResultReader::Script {
        function: "const m = document.querySelector('p').innerText.match(/Order (\\d+)/); \
                   return {order: Number(m[1]), asked: params.order, slot: '{{order}}'};"
            .into(),
    };
    let read = read_result(&b, &reader, &other, Some(&schema))
        .await
        .unwrap();
    assert_eq!(
        read,
        json!({"order": 1017, "asked": "1017", "slot": "1017"})
    );
    let wrong = ResultReader::Script {
        function: "return {order: 'none'};".into(),
    };
    let error = read_result(&b, &wrong, &other, Some(&schema))
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("does not match the output schema"),
        "{error}"
    );
    let empty = ResultReader::Script {
        function: "return '';".into(),
    };
    assert!(read_result(&b, &empty, &other, None).await.is_err());
    let throws = ResultReader::Script {
        function: "throw new Error('no table');".into(),
    };
    let error = read_result(&b, &throws, &other, None).await.unwrap_err();
    assert!(error.to_string().contains("no table"), "{error}");

    // Nothing reproduces the result: the recorded text, its value a slot.
    let model = functions(&["return 'x';", "return 'y';"]);
    let learned = learn_result(
        &model,
        &b,
        "Add the order",
        "Order 1017 is in the cart",
        None,
        &other,
    )
    .await;
    assert_eq!(learned.model_calls, 2);
    assert!(learned.note.is_some());
    assert_eq!(
        learned.reader,
        ResultReader::Text {
            template: "Order {{order}} is in the cart".into()
        }
    );
    b.into_session().release().await;
    pool.shutdown().await;
}

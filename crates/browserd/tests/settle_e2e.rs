//! The model sees what its last action did: `browserd run` (real Chromium, a mock model whose
//! answers depend only on the page text it is shown) on a shop page whose "Add" button calls an
//! API that answers after 0 ms, 300 ms and 1.5 s. The model clicks "Add" only while the page
//! shows it; had the capture been taken before the response, it would click again and the cart
//! would hold the item twice.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    Router,
    extract::{Query, State},
    response::Html,
    routing::get,
};
use browserd_tests::{Brain, MockModel, done_reply, index_of, reply};
use serde_json::{Value, json};

#[derive(Clone, Default)]
struct Cart(Arc<Mutex<HashMap<String, u32>>>);

#[derive(serde::Deserialize)]
struct ShopQuery {
    key: String,
    #[serde(default)]
    delay: u64,
}

async fn shop(Query(q): Query<ShopQuery>) -> Html<String> {
    Html(format!(
        r#"<!doctype html><html><head><title>Monitor</title></head><body>
<h1>27-inch monitor</h1><p>Price: 199 EUR</p>
<button id="cart-button">Add to cart</button>
<p>Cart: <span id="cart">empty</span></p>
<script>
document.getElementById('cart-button').addEventListener('click', async () => {{
  const res = await fetch('/api/cart?key={key}&delay={delay}', {{method: 'GET'}});
  const body = await res.json();
  document.getElementById('cart-button').textContent = 'Added to cart';
  document.getElementById('cart').textContent = body.items + ' item(s)';
}});
</script></body></html>"#,
        key = q.key,
        delay = q.delay
    ))
}

async fn add_to_cart(State(cart): State<Cart>, Query(q): Query<ShopQuery>) -> axum::Json<Value> {
    tokio::time::sleep(Duration::from_millis(q.delay)).await;
    let mut map = cart.0.lock().unwrap();
    let items = map.entry(q.key).or_insert(0);
    *items += 1;
    axum::Json(json!({"items": *items}))
}

async fn start_shop() -> (SocketAddr, Cart) {
    let cart = Cart::default();
    let app = Router::new()
        .route("/shop", get(shop))
        .route("/api/cart", get(add_to_cart))
        .with_state(cart.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, cart)
}

/// Adds the monitor while the page offers "Add to cart"; reports once it says "Added".
fn shopper(clicks: Arc<Mutex<u32>>) -> Brain {
    Arc::new(move |page: &str| {
        if page.contains("Added to cart") {
            return done_reply("The monitor is in the cart", true);
        }
        match index_of(page, "button", r"/>\s*Add to cart") {
            Some(index) => {
                *clicks.lock().unwrap() += 1;
                reply(
                    "add the monitor to the cart",
                    json!([{"click": {"index": index}}]),
                )
            }
            None => done_reply(&format!("no Add button on:\n{page}"), false),
        }
    })
}

#[tokio::test]
async fn the_next_step_sees_the_cart_after_the_api_answered() {
    let (shop_addr, cart) = start_shop().await;
    for delay in [0u64, 300, 1500] {
        let key = format!("delay-{delay}");
        let clicks = Arc::new(Mutex::new(0));
        let model = MockModel::start(shopper(clicks.clone()), Duration::ZERO).await;
        let dir = tempfile::tempdir().unwrap();
        let history_path = dir.path().join("history.json");
        let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_browserd"))
            .args([
                "run",
                "Add the 27-inch monitor to the cart",
                "--allow-loopback",
            ])
            .args(["--no-vision", "--max-steps", "6"])
            // A cap well above the slowest answer (1.5 s): on a loaded machine the page's own
            // work after the response takes time too; ending on the cap is not what is tested.
            .args(["--settle-timeout-ms", "6000"])
            .arg("--start-url")
            .arg(format!("http://{shop_addr}/shop?key={key}&delay={delay}"))
            .arg("--history-out")
            .arg(&history_path)
            .arg("--workspace")
            .arg(dir.path().join("workspace"))
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
            .output();
        let output = tokio::time::timeout(Duration::from_secs(120), output)
            .await
            .expect("browserd run took longer than 2 minutes")
            .expect("spawn browserd");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(0), "delay {delay} ms:\n{stderr}");
        assert_eq!(
            *clicks.lock().unwrap(),
            1,
            "delay {delay} ms: the model was shown the page before the response and clicked again"
        );
        assert_eq!(
            cart.0.lock().unwrap().get(&key),
            Some(&1),
            "delay {delay} ms"
        );
        // The step that clicked records the settle: how long and why it ended.
        let history: Value =
            serde_json::from_slice(&std::fs::read(&history_path).unwrap()).unwrap();
        let click_step = history["history"]
            .as_array()
            .unwrap()
            .iter()
            .find(|h| h["model_output"]["action"][0].get("click").is_some())
            .unwrap_or_else(|| panic!("no click step in the history: {history}"));
        let settle = &click_step["result"][0]["metadata"]["settle"];
        assert_eq!(settle["ended"], "quiet", "delay {delay} ms: {settle}");
        let settle_ms = settle["ms"].as_u64().expect("settle.ms");
        // The step's timings add the settle up (part of the actions' time).
        let timings = &click_step["metadata"];
        assert_eq!(timings["settle_ms"].as_u64(), Some(settle_ms), "{timings}");
        assert!(
            timings["actions_ms"].as_u64().unwrap() >= settle_ms,
            "{timings}"
        );
    }
}

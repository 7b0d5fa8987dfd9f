//! A small cable shop for replay tests (`browserd replay` and `replay_of`): a search form, a
//! results list with a "Buy" button per product, and an order page. [`CableShop::version`]
//! changes it under a recording: 1 inserts a banner, an input and a product before the
//! targets (every index shifts), 2 also removes the USB cable. The results never echo the query
//! (tests type a secret into it).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Form, Query, State};
use axum::response::Html;
use axum::routing::{get, post};

/// The shop's state: its version and what was searched and bought.
#[derive(Default)]
pub struct CableShop {
    pub version: AtomicU8,
    pub searches: Mutex<Vec<String>>,
    pub orders: Mutex<Vec<String>>,
}

impl CableShop {
    /// Serves the shop (and `/hold`, a page a model can wait on) on 127.0.0.1.
    pub async fn start() -> (SocketAddr, Arc<CableShop>) {
        let shop: Arc<CableShop> = Arc::default();
        let app = Router::new()
            .route("/", get(home))
            .route("/search", get(search))
            .route("/buy", post(buy))
            .route(
                "/hold",
                get(|| async { page("Hold", "<h1>Please hold</h1>") }),
            )
            .with_state(shop.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (addr, shop)
    }

    /// Changes the pages (see the module's documentation).
    pub fn set_version(&self, version: u8) {
        self.version.store(version, Ordering::SeqCst);
    }
}

fn page(title: &str, body: &str) -> Html<String> {
    Html(format!(
        "<!doctype html><html><head><title>{title}</title></head><body>{body}</body></html>"
    ))
}

async fn home(State(shop): State<Arc<CableShop>>) -> Html<String> {
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
    State(shop): State<Arc<CableShop>>,
    Query(query): Query<HashMap<String, String>>,
) -> Html<String> {
    let q = query.get("q").cloned().unwrap_or_default();
    shop.searches.lock().unwrap().push(q);
    let version = shop.version.load(Ordering::SeqCst);
    let mut items = String::new();
    if version > 0 {
        items.push_str(&product("hdmi-cable", "HDMI cable"));
    }
    if version < 2 {
        items.push_str(&product("usb-cable", "USB cable"));
    }
    items.push_str(&product("usb-hub", "USB hub"));
    page("Results", &format!("<h1>Results</h1><ul>{items}</ul>"))
}

async fn buy(
    State(shop): State<Arc<CableShop>>,
    Form(form): Form<HashMap<String, String>>,
) -> Html<String> {
    let sku = form.get("sku").cloned().unwrap_or_default();
    shop.orders.lock().unwrap().push(sku.clone());
    page(
        "Thanks",
        &format!("<h1>Thank you</h1><p>Order placed: {sku}</p>"),
    )
}

/// Index of the `<button>` whose text (the line below it in a capture) is `label`.
pub fn button_labelled(page: &str, label: &str) -> Option<u64> {
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

//! An orders app for the skill tests: a search form (an order number and an access code, the
//! code checked), a results table whose rows each show an order and have an identical "View"
//! button, and a details page with the order's status. Switches change it under a recorded
//! skill: [`OrdersApp::renamed`] makes each row's button an "Open" link, [`OrdersApp::confirm`]
//! inserts a confirmation page before the details, [`OrdersApp::moved`] moves the status field
//! into a table at the bottom of the details page, [`OrdersApp::unlabelled`] drops the status
//! field's id (a result reader looking for it finds nothing), [`OrdersApp::broken`] takes the
//! results away (a change no one can heal). It records what it served: searches and opened orders.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::response::Html;
use axum::routing::get;
use regex::Regex;
use serde_json::{Value, json};

use crate::{RequestBrain, done_reply, index_of, message_texts, page_text, reply};

/// The access code the search form wants (tests pass it as a task secret).
pub const ACCESS_CODE: &str = "open-sesame-7731";

/// The orders: number, customer, status; the results list them in this order.
pub const ORDERS: [(&str, &str, &str); 4] = [
    ("3150", "Carol", "Processing"),
    ("1042", "Alice", "Shipped"),
    ("4411", "Dave", "Cancelled"),
    ("2077", "Bob", "Delivered"),
];

/// The app's switches and what it served.
#[derive(Default)]
pub struct OrdersApp {
    pub renamed: AtomicBool,
    pub confirm: AtomicBool,
    pub moved: AtomicBool,
    pub unlabelled: AtomicBool,
    pub broken: AtomicBool,
    pub searches: Mutex<Vec<String>>,
    /// Order numbers whose details page was served, in order.
    pub opened: Mutex<Vec<String>>,
}

impl OrdersApp {
    /// Serves the app on 127.0.0.1.
    pub async fn start() -> (SocketAddr, Arc<OrdersApp>) {
        let app: Arc<OrdersApp> = Arc::default();
        let router = Router::new()
            .route("/", get(home))
            .route("/public", get(public_home))
            .route("/search", get(search))
            .route("/orders/{n}", get(details))
            .route("/orders/{n}/confirm", get(confirm))
            .with_state(app.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
        (addr, app)
    }

    /// Sets a switch.
    pub fn set(switch: &AtomicBool, on: bool) {
        switch.store(on, Ordering::SeqCst);
    }

    pub fn opened(&self) -> Vec<String> {
        self.opened.lock().unwrap().clone()
    }
}

fn page(title: &str, body: &str) -> Html<String> {
    Html(format!(
        "<!doctype html><html><head><title>{title}</title></head><body>{body}</body></html>"
    ))
}

async fn home() -> Html<String> {
    page(
        "Orders",
        r#"<h1>Order desk</h1>
        <form action="/search" method="get">
          <input type="text" name="q" placeholder="Order number">
          <input type="password" name="code" placeholder="Access code">
          <button type="submit" id="search">Search</button>
        </form>"#,
    )
}

/// The desk without the access code field (the code travels hidden: the search is the same).
async fn public_home() -> Html<String> {
    page(
        "Orders",
        &format!(
            r#"<h1>Order desk</h1>
        <form action="/search" method="get">
          <input type="text" name="q" placeholder="Order number">
          <input type="hidden" name="code" value="{ACCESS_CODE}">
          <button type="submit" id="search">Search</button>
        </form>"#
        ),
    )
}

#[derive(serde::Deserialize)]
struct SearchQuery {
    #[serde(default)]
    q: String,
    #[serde(default)]
    code: String,
}

async fn search(
    State(app): State<Arc<OrdersApp>>,
    Query(query): Query<SearchQuery>,
) -> Html<String> {
    app.searches.lock().unwrap().push(query.q.clone());
    if query.code != ACCESS_CODE {
        return page("Denied", "<h1>Access denied</h1><p>Wrong access code.</p>");
    }
    if app.broken.load(Ordering::SeqCst) {
        return page(
            "Unavailable",
            "<h1>Search is unavailable</h1><p>The order index is being rebuilt.</p>",
        );
    }
    let confirm = app.confirm.load(Ordering::SeqCst);
    let renamed = app.renamed.load(Ordering::SeqCst);
    let rows: String = ORDERS
        .iter()
        .map(|(number, customer, _)| {
            let target = if confirm {
                format!("/orders/{number}/confirm")
            } else {
                format!("/orders/{number}")
            };
            let action = if renamed {
                format!(r#"<a class="open" href="{target}">Open</a>"#)
            } else {
                format!(
                    r#"<form action="{target}" method="get"><button type="submit">View</button></form>"#
                )
            };
            format!("<tr><td>Order {number}</td><td>{customer}</td><td>{action}</td></tr>")
        })
        .collect();
    page(
        "Results",
        &format!(
            "<h1>Recent orders</h1><p>Searched: {}</p>\
             <table><tr><th>Order</th><th>Customer</th><th></th></tr>{rows}</table>",
            html_escape(&query.q)
        ),
    )
}

async fn confirm(Path(number): Path<String>) -> Html<String> {
    page(
        "Confirm",
        &format!(
            r#"<h1>Open order {n}?</h1><p>Opening an order is logged.</p>
            <form action="/orders/{n}" method="get"><button type="submit">Continue</button></form>"#,
            n = html_escape(&number)
        ),
    )
}

async fn details(State(app): State<Arc<OrdersApp>>, Path(number): Path<String>) -> Html<String> {
    let Some((number, customer, status)) = ORDERS.iter().find(|(n, _, _)| *n == number) else {
        return page("Not found", "<h1>No such order</h1>");
    };
    app.opened.lock().unwrap().push((*number).to_owned());
    let body = if app.unlabelled.load(Ordering::SeqCst) {
        format!("<h1>Order {number}</h1><p>Customer: {customer}</p><p>State: {status}</p>")
    } else if app.moved.load(Ordering::SeqCst) {
        format!(
            r#"<h1>Order {number}</h1><p>Customer: {customer}</p><p>Thank you for your order.</p>
            <table><tr><th>Status</th><td id="status">{status}</td></tr></table>"#
        )
    } else {
        format!(
            r#"<h1>Order {number}</h1><p>Status: <span id="status">{status}</span></p>
            <p>Customer: {customer}</p>"#
        )
    };
    page(&format!("Order {number}"), &body)
}

fn html_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The status of order `number`.
pub fn status_of(number: &str) -> &'static str {
    ORDERS
        .iter()
        .find(|(n, _, _)| *n == number)
        .map(|(_, _, s)| *s)
        .unwrap_or("?")
}

/// The index of the first `<button>` or `<a>` after the line showing `Order {order}`.
pub fn row_action(page: &str, order: &str) -> Option<u64> {
    let lines: Vec<&str> = page.lines().collect();
    let label = format!("Order {order}");
    let at = lines
        .iter()
        .position(|l| l.contains(&label) && !l.contains('<'))?;
    lines[at + 1..].iter().find_map(|line| {
        let line = line.trim().trim_start_matches('*');
        let (index, tag) = line.strip_prefix('[')?.split_once(']')?;
        (tag.starts_with("<button") || tag.starts_with("<a"))
            .then(|| index.parse().ok())
            .flatten()
    })
}

/// The index of the `<button>` labelled `label` (its text on the next line, or inline).
pub fn button(page: &str, label: &str) -> Option<u64> {
    let re = Regex::new(&format!(r"\[(\d+)\]<button[^\n]*(?:\n\s*)?{label}")).unwrap();
    re.captures(page).and_then(|c| c[1].parse().ok())
}

/// The scripted model: the agent's steps on the orders app (generation), the result reader it
/// writes once, and the healer's single steps (its task starts "You repair ONE step").
pub fn orders_brain() -> RequestBrain {
    Arc::new(|request: &Value| {
        let texts = message_texts(request).join("\n");
        if texts.contains("You write a small JavaScript function") {
            if texts.contains("Output schema") {
                return json!({"function": "return {order: params.order, status: document.querySelector('#status').innerText.trim()};"});
            }
            return json!({"function": "const s = document.querySelector('#status').innerText.trim();\nreturn 'Order ' + params.order + ': ' + s;"});
        }
        let page = page_text(request);
        let healing = texts.contains("You repair ONE step");
        let pattern = if healing {
            r"- order = (\d+)"
        } else {
            r"(?:Find|Look up) order (\d+)"
        };
        let order = Regex::new(pattern)
            .unwrap()
            .captures(&texts)
            .map(|c| c[1].to_owned())
            .unwrap_or_default();
        if page.contains("Search is unavailable") {
            return done_reply("the order search results are gone", false);
        }
        if page.contains("Access denied") {
            return done_reply("access denied", false);
        }
        if let Some(index) = button(&page, "Continue") {
            return reply(
                "confirm opening the order",
                json!([{"click": {"index": index}}]),
            );
        }
        if page.contains("Recent orders")
            && let Some(index) = row_action(&page, &order)
        {
            return reply(
                &format!("open order {order}"),
                json!([{"click": {"index": index}}]),
            );
        }
        if page.contains(&format!("Order {order}")) && page.contains("Customer:") {
            if texts.contains("Look up order") {
                let data = json!({"order": order, "status": status_of(&order)});
                return reply("report", json!([{"done": {"data": data, "success": true}}]));
            }
            return done_reply(&format!("Order {order}: {}", status_of(&order)), true);
        }
        match (
            index_of(&page, "input", "Order number"),
            index_of(&page, "input", "Access code"),
            index_of(&page, "button", "id=search"),
        ) {
            (Some(number), Some(code), Some(search)) => reply(
                "search for the order",
                json!([
                    {"input": {"index": number, "text": order, "clear": true}},
                    {"input": {"index": code, "text": "<secret>code</secret>", "clear": true}},
                    {"click": {"index": search}}
                ]),
            ),
            // The public desk (`/public`) asks for no access code.
            (Some(number), None, Some(search)) => reply(
                "search for the order",
                json!([
                    {"input": {"index": number, "text": order, "clear": true}},
                    {"click": {"index": search}}
                ]),
            ),
            _ => done_reply(&format!("lost on:\n{page}"), false),
        }
    })
}

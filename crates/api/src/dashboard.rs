//! The web dashboard: a small framework-free UI (`crates/api/ui/`, plain HTML, CSS and ES
//! modules) compiled into the binary with `include_str!`, so nothing is built or downloaded at
//! install time. It talks to the same `/v1` API as any client, with the API key the user signs
//! in with (kept in the tab's `sessionStorage` only): tasks, their live events
//! (`/v1/tasks/{id}/events`) and the live view (`/v1/tasks/{id}/live`), both WebSockets
//! authenticated with the `bearer` subprotocol.
//!
//! The pages need no credentials to load (they hold none); a strict Content-Security-Policy
//! allows only this origin's scripts, styles and connections (no inline script, no eval), and
//! images from `blob:` (screenshots and live frames are fetched with the key, then shown).

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::AppState;

const INDEX_HTML: &str = include_str!("../ui/index.html");
const APP_JS: &str = include_str!("../ui/app.js");
const APP_CSS: &str = include_str!("../ui/app.css");

/// The dashboard's Content-Security-Policy.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; \
                   connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The dashboard's files: path, body and content type (each one `GET` route).
pub(crate) const ASSETS: [(&str, &str, &str); 3] = [
    ("/", INDEX_HTML, "text/html; charset=utf-8"),
    ("/ui/app.js", APP_JS, "text/javascript; charset=utf-8"),
    ("/ui/app.css", APP_CSS, "text/css; charset=utf-8"),
];

/// The dashboard's routes: `/` and its assets under `/ui/` ([`ASSETS`]).
pub(crate) fn router() -> Router<AppState> {
    ASSETS
        .into_iter()
        .fold(Router::new(), |router, (path, body, content_type)| {
            router.route(path, get(move || async move { asset(body, content_type) }))
        })
}

fn asset(body: &'static str, content_type: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(CSP),
            ),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
            (
                header::REFERRER_POLICY,
                HeaderValue::from_static("no-referrer"),
            ),
            (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
            // The assets change with the binary; revalidating is cheap next to a stale UI.
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        body,
    )
        .into_response()
}

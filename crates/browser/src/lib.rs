//! Chrome pool and page capture over CDP: this crate owns the Chrome processes (or remote
//! Chrome endpoints) of a worker, the isolated browser context each task leases, and the
//! capture of a tab as browser-use's indexed page text (DOMSnapshot + layout + selective
//! accessibility, visibility, interactivity rules, paint-order occlusion, bbox containment,
//! same- and cross-origin iframes, shadow DOM) with its index → element map, page metrics,
//! tabs and an optional screenshot. The pool launches Chrome ([`launch`]: cleared environment,
//! its own unprivileged user under a root worker, sandbox on) and drives it over its
//! `--remote-debugging-pipe` — it listens on no port —; contexts, tabs, navigation,
//! observation, the egress guard and the raw CDP escape hatch go through this crate's one
//! connection per Chrome ([`cdp`]: the pipe, or a WebSocket to a remote endpoint).
//!
//! Browser actions with browser-use's names and semantics ([`actions`]) run on a session with
//! [`BrowserSession::execute`]; JavaScript dialogs, downloads and popups are handled per session.
//!
//! Entry points: [`BrowserPool::new`] → [`BrowserPool::lease_with`] → [`BrowserSession::capture`]
//! / [`BrowserSession::execute`].

pub mod actions;
mod capture;
pub mod cdp;
mod dom;
pub mod egress;
pub mod error;
pub mod highlight;
mod interactive;
pub mod launch;
pub mod live;
mod paint_order;
pub mod pool;
mod serializer;
mod session;
pub mod settle;
mod snapshot;
pub mod types;

pub use actions::{Action, ActionContext, ActionResult};
pub use error::{BrowserError, Result};
pub use launch::{ChromeBuild, ChromeIdentity, ChromeUser, Sandbox};
pub use live::{FrameSender, LiveViewSettings, ScreencastFrame};
pub use pool::{
    BrowserPool, CHROME_FLAGS, DEFAULT_CHROME_NICE, DEFAULT_CHROME_PATH,
    DEFAULT_RENDERER_MEMORY_CAP_MB, DEFAULT_SPARE_CONTEXTS, FULL_CHROME_PATH, PoolConfig,
    describe_metrics,
};
pub use serializer::DEFAULT_INCLUDE_ATTRIBUTES;
pub use session::{
    BrowserSession, ContextOptions, DownloadCaps, OriginStorage, StorageItem, StorageState,
    cookie_param, local_storage_init_script,
};
pub use settle::{SettleEnd, SettleReport, SettleSettings};
pub use snapshot::SNAPSHOT_STYLES;
pub use types::*;

/// Parameters of a bare `DOMSnapshot.captureSnapshot` (the benchmark baseline):
/// computed styles display/visibility/opacity, DOM rects and paint order.
pub fn bare_snapshot_params() -> serde_json::Value {
    serde_json::json!({
        "computedStyles": ["display", "visibility", "opacity"],
        "includePaintOrder": true,
        "includeDOMRects": true,
    })
}

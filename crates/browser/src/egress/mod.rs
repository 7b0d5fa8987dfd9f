//! Egress policy for a task's browser: which URLs may be requested, checked statically
//! ([`EgressPolicy::check_url`]) and with DNS ([`EgressPolicy::check_url_resolved`]), and
//! enforced on every request of a browser context by an [`EgressGuard`] (CDP Fetch interception
//! on every target: pages, popups, cross-origin iframes, workers).
//!
//! Rules follow browser-use's security watchdog (`allowed_domains`, `prohibited_domains`,
//! `block_ip_addresses`; the domain patterns are `browserd_domains`', shared with the api and the
//! agent) and add what a shared service needs by default: private,
//! link-local, metadata, reserved and (unless [`EgressSettings::allow_loopback`]) loopback
//! destinations are blocked in every encoding the browser accepts, and so are host names that
//! resolve to them.
//!
//! Schemes: `about:blank`, `about:srcdoc` and the new-tab page are always allowed; `data:` and
//! `blob:` only while no domain list is set (browser-use); http, https, ws and wss are checked;
//! everything else (`file:`, `chrome:`, `javascript:`, `chrome-extension:`, `view-source:`, `ftp:`
//! …) is refused — unlike browser-use, also without domain lists, because a service must never let
//! a task read the worker's files or browser internals.
//!
//! Usage by a session: build the policy from the task's settings, open the context's listener on
//! the pool's [`EgressProxy`] and create the browser context with it as `proxyServer`
//! (`proxyBypassList: "<-loopback>"`), so every connection of the context — WebSockets,
//! preconnects and WebRTC over TCP included — is checked at the network level against
//! addresses resolved once and pinned; then
//! `EgressGuard::attach_on(&chrome.conn, EgressScope::Context(id), policy, options)` before the
//! first page (a browser session of the guards' own on the Chrome's one CDP connection — a
//! launched Chrome's pipe; `attach` / `attach_to_browser` open a websocket of their own to a
//! Chrome known by its URL), check navigation targets with `check_url_resolved` before `Page.navigate` (a clear
//! error without a round trip), and turn both `drain_blocked()`s into action errors after each
//! action.

pub use browserd_domains::addr;
pub mod guard;
mod link;
pub mod policy;
pub mod proxy;
pub mod resolve;

pub use addr::{AddressRange, classify};
pub use browserd_domains::{DomainPattern, PatternError};
pub use guard::{
    BlockedRequest, EgressGuard, EgressGuardError, EgressGuardOptions, EgressGuardStats,
    EgressScope,
};
pub use link::LinkError;
pub use policy::{
    DEFAULT_DNS_TIMEOUT, DenyReason, EgressConfigError, EgressDenied, EgressPolicy, EgressSettings,
    Network, PolicySlot,
};
pub use proxy::{ContextProxy, EgressProxy, ProxyError, ProxyOptions, ProxyStats, UpstreamProxy};
pub use resolve::{HostOverride, HostResolver, ResolveError};

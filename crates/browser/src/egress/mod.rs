//! Egress policy for a task's browser: which URLs may be requested, checked statically
//! ([`EgressPolicy::check_url`]) and with DNS ([`EgressPolicy::check_url_resolved`]).
//!
//! Rules follow browser-use's security watchdog (`allowed_domains`, `prohibited_domains`,
//! `block_ip_addresses`, see [`pattern`]) and add what a shared service needs by default: private,
//! link-local, metadata, reserved and (unless [`EgressSettings::allow_loopback`]) loopback
//! destinations are blocked in every encoding the browser accepts, and so are host names that
//! resolve to them.

pub mod addr;
pub mod guard;
mod link;
pub mod pattern;
pub mod policy;
pub mod resolve;

pub use addr::{AddressRange, classify};
pub use guard::{
    BlockedRequest, EgressGuard, EgressGuardError, EgressGuardOptions, EgressGuardStats,
    EgressScope,
};
pub use link::LinkError;
pub use pattern::{DomainPattern, PatternError};
pub use policy::{
    DEFAULT_DNS_TIMEOUT, DenyReason, EgressConfigError, EgressDenied, EgressPolicy, EgressSettings,
};
pub use resolve::{HostOverride, HostResolver, ResolveError};

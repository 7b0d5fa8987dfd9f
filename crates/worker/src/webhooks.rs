//! Delivers the webhook outbox (migration 0008, `browserd_store::webhooks`): signed POSTs, at
//! least once, in order per webhook and task, with exponential backoff for hours; never on
//! a task's path (a task status change only inserts outbox rows in its own transaction).
//!
//! Signature as browser-use cloud's webhooks: `X-Browser-Use-Timestamp` = unix seconds,
//! `X-Browser-Use-Signature` = hex HMAC-SHA256(secret, "{timestamp}.{body}") where the body is
//! the event as Python's `json.dumps(event, separators=(",", ":"), sort_keys=True)` writes it
//! (the exact bytes sent). Targets go through the browser's address rules
//! (`browserd_domains::addr::first_refused`, as the api at registration): private,
//! link-local, metadata and reserved
//! addresses are refused, loopback only when the operator allows it; the checked address is
//! the one connected to (no second DNS lookup), and redirects are not followed.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use browserd_browser::egress::addr::first_refused;
use browserd_browser::egress::resolve::HostResolver;
use browserd_store::{ClaimedDelivery, DeliveryOutcome, Store};
use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;
use time::OffsetDateTime;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// Settings of the dispatcher.
#[derive(Clone, Debug)]
pub struct WebhookSettings {
    /// Webhooks may target 127.0.0.0/8, ::1 and `localhost` (the worker's `--allow-loopback`).
    pub allow_loopback: bool,
    /// How often the outbox is read when it was empty.
    pub poll_interval: Duration,
    /// One POST at most this long (connect included).
    pub request_timeout: Duration,
    /// First retry delay; doubles with each attempt up to `max_backoff`.
    pub first_backoff: Duration,
    pub max_backoff: Duration,
    /// A delivery still failing this long after its event is given up.
    pub max_age: Duration,
}

impl Default for WebhookSettings {
    fn default() -> Self {
        Self {
            allow_loopback: false,
            poll_interval: Duration::from_secs(1),
            request_timeout: Duration::from_secs(10),
            first_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(3600),
            max_age: Duration::from_secs(24 * 3600),
        }
    }
}

/// Deliveries claimed per round.
const BATCH: i64 = 20;
/// Attempts in flight at once, all endpoints together.
const MAX_IN_FLIGHT: usize = 16;
/// Deliveries one endpoint may have claimed on this worker: one in flight (an endpoint's
/// deliveries go one at a time), the rest waiting in its lane. An endpoint at this count gets
/// no more until its lane moves, so a slow or dead endpoint holds up only its own deliveries.
const LANE_DEPTH: usize = 4;

/// Runs until `shutdown`: claims due deliveries and attempts them, each endpoint in a lane of
/// its own (one attempt at a time, at most [`LANE_DEPTH`] claimed), all lanes together at most
/// [`MAX_IN_FLIGHT`] attempts at once.
pub async fn run_webhook_dispatcher(
    store: Store,
    settings: WebhookSettings,
    shutdown: CancellationToken,
) {
    let resolver = Arc::new(HostResolver::system(Duration::from_secs(5)));
    // A claimed delivery waits behind at most the rest of its lane (fewer than 2 × LANE_DEPTH:
    // a round claims at most LANE_DEPTH per endpoint, for lanes below LANE_DEPTH): its claim
    // outlives that.
    let lease = settings.request_timeout * (2 * LANE_DEPTH as u32) + Duration::from_secs(30);
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let settings = Arc::new(settings);
    let mut lanes: HashMap<Uuid, Lane> = HashMap::new();
    let mut finished = JoinSet::new();
    loop {
        // Lanes whose task ended are gone; their endpoints may be claimed again.
        lanes.retain(|_, lane| !lane.sender.is_closed());
        let full: Vec<Uuid> = lanes
            .iter()
            .filter(|(_, lane)| lane.claimed.load(Ordering::SeqCst) >= LANE_DEPTH)
            .map(|(id, _)| *id)
            .collect();
        let claimed = tokio::select! {
            () = shutdown.cancelled() => break,
            claimed = store.claim_deliveries(BATCH, lease, &full, LANE_DEPTH as i64) => claimed,
        };
        let batch = match claimed {
            Ok(batch) => batch,
            Err(err) => {
                tracing::warn!(%err, "could not read the webhook outbox");
                Vec::new()
            }
        };
        let idle = batch.is_empty();
        for mut delivery in batch {
            let webhook = delivery.webhook_id;
            loop {
                let lane = lanes.entry(webhook).or_insert_with(|| {
                    Lane::start(
                        &mut finished,
                        store.clone(),
                        settings.clone(),
                        resolver.clone(),
                        in_flight.clone(),
                    )
                });
                lane.claimed.fetch_add(1, Ordering::SeqCst);
                // Room for 2 × LANE_DEPTH: a send never waits on a slow endpoint.
                match lane.sender.try_send(delivery) {
                    Ok(()) => break,
                    // The lane ended (idle) just now: a new one takes the delivery.
                    Err(mpsc::error::TrySendError::Closed(back)) => {
                        lanes.remove(&webhook);
                        delivery = back;
                    }
                    Err(mpsc::error::TrySendError::Full(back)) => {
                        lane.claimed.fetch_sub(1, Ordering::SeqCst);
                        tracing::warn!(
                            delivery = back.id,
                            "webhook lane full; retried after its lease"
                        );
                        break;
                    }
                }
            }
        }
        while finished.try_join_next().is_some() {}
        if idle {
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(settings.poll_interval) => {}
            }
        }
    }
    // Deliveries in flight finish (bounded by the request timeout); queued ones are retried
    // after their lease by whichever worker claims them.
    drop(lanes);
    while finished.join_next().await.is_some() {}
}

/// One endpoint's deliveries on this worker, attempted one at a time in claim order.
struct Lane {
    sender: mpsc::Sender<ClaimedDelivery>,
    /// Claimed and not finished (waiting or in flight).
    claimed: Arc<AtomicUsize>,
}

impl Lane {
    fn start(
        tasks: &mut JoinSet<()>,
        store: Store,
        settings: Arc<WebhookSettings>,
        resolver: Arc<HostResolver>,
        in_flight: Arc<Semaphore>,
    ) -> Self {
        let (sender, mut receiver) = mpsc::channel::<ClaimedDelivery>(2 * LANE_DEPTH);
        let claimed = Arc::new(AtomicUsize::new(0));
        let count = claimed.clone();
        tasks.spawn(async move {
            // A lane with nothing to do for a while ends (the dispatcher starts a new one).
            while let Ok(Some(delivery)) = tokio::time::timeout(LANE_IDLE, receiver.recv()).await {
                let Ok(_permit) = in_flight.acquire().await else {
                    return;
                };
                deliver(&store, &delivery, &settings, &resolver).await;
                count.fetch_sub(1, Ordering::SeqCst);
            }
        });
        Lane { sender, claimed }
    }
}

/// How long a lane waits for more before it ends.
const LANE_IDLE: Duration = Duration::from_secs(30);

/// Attempts `delivery` once and records the outcome.
async fn deliver(
    store: &Store,
    delivery: &ClaimedDelivery,
    settings: &WebhookSettings,
    resolver: &HostResolver,
) {
    let outcome = attempt(delivery, settings, resolver).await;
    match &outcome {
        DeliveryOutcome::Delivered { status_code } => {
            tracing::debug!(delivery = delivery.id, status_code, "webhook delivered");
        }
        DeliveryOutcome::Retry { error, .. } => {
            tracing::info!(delivery = delivery.id, attempts = delivery.attempts, %error, "webhook delivery failed; will retry");
        }
        DeliveryOutcome::Failed { error, .. } => {
            tracing::warn!(delivery = delivery.id, %error, "webhook delivery given up");
        }
    }
    metrics::counter!("browserd_webhook_attempts_total", "outcome" => match outcome {
        DeliveryOutcome::Delivered { .. } => "delivered",
        DeliveryOutcome::Retry { .. } => "retry",
        DeliveryOutcome::Failed { .. } => "failed",
    })
    .increment(1);
    if let Err(err) = store.finish_delivery(delivery.id, &outcome).await {
        // The claim's lease makes the delivery due again: at least once.
        tracing::warn!(%err, delivery = delivery.id, "could not record a webhook delivery");
    }
}

/// One attempt of one delivery.
async fn attempt(
    delivery: &ClaimedDelivery,
    settings: &WebhookSettings,
    resolver: &HostResolver,
) -> DeliveryOutcome {
    let address = match target_address(&delivery.url, settings.allow_loopback, resolver).await {
        Ok(address) => address,
        Err(Target::Refused(error)) => {
            return DeliveryOutcome::Failed {
                status_code: None,
                error,
            };
        }
        Err(Target::Unreachable(error)) => return retry(delivery, settings, None, error),
    };
    if let Some(error) = &delivery.secret_error {
        // The operator may configure the right secrets key before the delivery gets too old.
        return retry(delivery, settings, None, error.clone());
    }
    let body = python_json(&delivery.body);
    let timestamp = OffsetDateTime::now_utc().unix_timestamp().to_string();
    let signature = sign(&delivery.secret, &timestamp, &body);
    browserd_llm::install_tls_provider();
    let mut builder = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(settings.request_timeout)
        .connect_timeout(settings.request_timeout)
        .user_agent(concat!("browserd-webhooks/", env!("CARGO_PKG_VERSION")));
    if let Some((host, address)) = address {
        builder = builder.resolve(&host, address);
    }
    let client = match builder.build() {
        Ok(client) => client,
        Err(err) => return retry(delivery, settings, None, format!("http client: {err}")),
    };
    let sent = client
        .post(&delivery.url)
        .header("content-type", "application/json")
        .header("x-browser-use-timestamp", &timestamp)
        .header("x-browser-use-signature", signature)
        .body(body)
        .send()
        .await;
    match sent {
        Ok(response) if response.status().is_success() => DeliveryOutcome::Delivered {
            status_code: i32::from(response.status().as_u16()),
        },
        Ok(response) => {
            let code = response.status().as_u16();
            retry(
                delivery,
                settings,
                Some(i32::from(code)),
                format!("the endpoint answered {code}"),
            )
        }
        // No URL in the message: it could carry credentials.
        Err(err) => retry(
            delivery,
            settings,
            None,
            format!("request failed: {}", error_chain(&err.without_url())),
        ),
    }
}

/// An error with its sources: "error sending request: connection refused…".
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

fn retry(
    delivery: &ClaimedDelivery,
    settings: &WebhookSettings,
    status_code: Option<i32>,
    error: String,
) -> DeliveryOutcome {
    let now = OffsetDateTime::now_utc();
    let age = now - delivery.created_at;
    if age >= settings.max_age {
        return DeliveryOutcome::Failed {
            status_code,
            error: format!("{error}; given up after {} attempts", delivery.attempts),
        };
    }
    let delay = backoff(delivery.attempts, settings);
    DeliveryOutcome::Retry {
        status_code,
        error,
        at: now + delay,
    }
}

/// `first · 2^(attempts-1)`, capped, minus up to 20 % jitter.
fn backoff(attempts: i32, settings: &WebhookSettings) -> Duration {
    let exponent = u32::try_from(attempts.saturating_sub(1))
        .unwrap_or(0)
        .min(30);
    let base = settings
        .first_backoff
        .saturating_mul(2u32.saturating_pow(exponent))
        .min(settings.max_backoff);
    base.mul_f64(1.0 - fastrand::f64() * 0.2)
}

enum Target {
    /// Never allowed (scheme, address range): not retried.
    Refused(String),
    /// DNS failed: retried.
    Unreachable(String),
}

/// The address to connect to, after the address rules: `None` for an IP literal (reqwest
/// connects to it as is), else the host name with the checked address to pin.
async fn target_address(
    url: &str,
    allow_loopback: bool,
    resolver: &HostResolver,
) -> Result<Option<(String, SocketAddr)>, Target> {
    let parsed =
        url::Url::parse(url).map_err(|err| Target::Refused(format!("invalid URL: {err}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(Target::Refused(
            "only http and https URLs are allowed".into(),
        ));
    }
    let port = parsed.port_or_known_default().unwrap_or(80);
    let (host, addresses) = match parsed.host() {
        Some(url::Host::Ipv4(ip)) => (None, vec![IpAddr::V4(ip)]),
        Some(url::Host::Ipv6(ip)) => (None, vec![IpAddr::V6(ip)]),
        Some(url::Host::Domain(name)) => {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            let addresses = resolver
                .resolve(&name)
                .await
                .map_err(|err| Target::Unreachable(format!("DNS: {err}")))?;
            (Some(name), addresses)
        }
        None => return Err(Target::Refused("the URL has no host".into())),
    };
    // Every address must pass: a name resolving to one private address is refused.
    if let Some(range) = first_refused(&addresses, allow_loopback) {
        return Err(Target::Refused(format!(
            "webhook target is {}, which is not allowed",
            range.describe()
        )));
    }
    let first = addresses
        .first()
        .ok_or_else(|| Target::Unreachable("DNS: no address".into()))?;
    Ok(host.map(|host| (host, SocketAddr::new(*first, port))))
}

/// Hex HMAC-SHA256 of `"{timestamp}.{body}"` under `secret`.
pub fn sign(secret: &str, timestamp: &str, body: &str) -> String {
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret.as_bytes()) else {
        // HMAC takes keys of any length.
        return String::new();
    };
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body.as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

/// `value` as Python's `json.dumps(value, separators=(",", ":"), sort_keys=True)`: compact,
/// keys sorted, non-ASCII escaped as `\uXXXX` (surrogate pairs above the BMP).
pub fn python_json(value: &Value) -> String {
    let mut out = String::new();
    write_json(value, &mut out);
    out
}

fn write_json(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(key, out);
                out.push(':');
                write_json(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json(item, out);
            }
            out.push(']');
        }
        Value::String(s) => write_string(s, out),
        other => out.push_str(&other.to_string()),
    }
}

fn write_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (c as u32) > 0x7e => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_is_written_as_python_does() {
        let value = json!({"b": 1, "a": {"z": null, "y": [true, "é😀\n\u{7f}"]}});
        assert_eq!(
            python_json(&value),
            r#"{"a":{"y":[true,"\u00e9\ud83d\ude00\n\u007f"],"z":null},"b":1}"#
        );
    }

    #[test]
    fn signature_is_hmac_sha256_hex() {
        // RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?".
        let mut mac = Hmac::<Sha256>::new_from_slice(b"Jefe").unwrap();
        mac.update(b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(mac.finalize().into_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        let mut mac = Hmac::<Sha256>::new_from_slice(b"k").unwrap();
        mac.update(b"1700000000.{\"a\":1}");
        assert_eq!(
            sign("k", "1700000000", "{\"a\":1}"),
            hex::encode(mac.finalize().into_bytes())
        );
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        let settings = WebhookSettings::default();
        assert!(backoff(1, &settings) <= Duration::from_secs(1));
        assert!(backoff(1, &settings) >= Duration::from_millis(800));
        assert!(backoff(4, &settings) >= Duration::from_millis(6400));
        assert!(backoff(40, &settings) <= Duration::from_secs(3600));
    }

    #[tokio::test]
    async fn private_targets_are_refused() {
        let resolver = HostResolver::system(Duration::from_secs(1));
        for url in [
            "http://169.254.169.254/latest",
            "http://10.0.0.1/",
            "http://127.0.0.1:9/",
            "http://localhost:9/",
            "file:///etc/passwd",
        ] {
            assert!(
                matches!(
                    target_address(url, false, &resolver).await,
                    Err(Target::Refused(_))
                ),
                "{url}"
            );
        }
        assert!(matches!(
            target_address("http://127.0.0.1:9/", true, &resolver).await,
            Ok(None)
        ));
        assert!(matches!(
            target_address("http://localhost:9/", true, &resolver).await,
            Ok(Some(_))
        ));
        assert!(matches!(
            target_address("http://169.254.169.254/", true, &resolver).await,
            Err(Target::Refused(_))
        ));
    }
}

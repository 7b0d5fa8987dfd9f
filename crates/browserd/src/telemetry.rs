//! Logs, traces and the metrics recorder of the process.
//!
//! - Logs: `tracing_subscriber::fmt` on stderr, text or JSON (`BROWSERD_LOG_FORMAT`), filtered by
//!   `RUST_LOG`. JSON lines carry `trace_id` and `span_id` when tracing is on; request ids are a
//!   field of the `request` span.
//! - Traces: OpenTelemetry over OTLP/HTTP (protobuf), on only when `OTEL_EXPORTER_OTLP_ENDPOINT`
//!   (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set and not empty and `OTEL_SDK_DISABLED` is
//!   not `true`. The exporter and SDK read the standard variables themselves (headers, timeout,
//!   compression, sampler, batch settings, resource attributes); the service name defaults to
//!   `browserd`. The library crates only create `tracing` spans; this module exports them and
//!   implements the W3C trace-context hooks the api and the worker take.
//! - Metrics: the Prometheus recorder (`browserd_api::metrics_handle`) with every family
//!   described up front.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::Context as _;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::{Dispatch, Subscriber};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::filter::Targets;

use tracing_subscriber::fmt::format::{Format, Json, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::{EnvFilter, Layer};

use crate::LogFormat;

/// The dispatcher, for the JSON formatter to look up OpenTelemetry ids of spans (inside an
/// event callback `tracing` hides the current dispatcher).
static DISPATCH: OnceLock<Dispatch> = OnceLock::new();

/// What must be flushed when the process ends.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Whether spans are exported.
    pub fn tracing_enabled(&self) -> bool {
        self.provider.is_some()
    }

    /// Exports the spans still buffered (bounded: an unreachable collector does not hold up
    /// the exit for long).
    pub async fn shutdown(self) {
        if let Some(provider) = self.provider {
            let flushed = tokio::task::spawn_blocking(move || {
                provider.shutdown_with_timeout(Duration::from_secs(5))
            })
            .await;
            if let Ok(Err(err)) = flushed {
                eprintln!("browserd: flushing traces failed: {err}");
            }
        }
    }
}

fn env_set(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.trim().is_empty())
}

/// Whether the OTEL_* environment asks for trace export.
fn otlp_requested() -> bool {
    let disabled =
        std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.trim().eq_ignore_ascii_case("true"));
    !disabled
        && (env_set("OTEL_EXPORTER_OTLP_ENDPOINT") || env_set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
}

fn tracer_provider(role: &str) -> anyhow::Result<SdkTracerProvider> {
    for name in [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ] {
        if let Ok(protocol) = std::env::var(name) {
            let protocol = protocol.trim();
            anyhow::ensure!(
                protocol.is_empty() || protocol == "http/protobuf",
                "{name}={protocol} is not supported: browserd exports OTLP over HTTP \
                 (http/protobuf, port 4318 of a collector)"
            );
        }
        if env_set(name) {
            break;
        }
    }
    // The exporter builds a reqwest client, which needs the process's TLS provider.
    browserd_llm::install_tls_provider();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()
        .context("building the OTLP span exporter (OTEL_EXPORTER_OTLP_*)")?;
    let mut resource = Resource::builder();
    let named_in_attributes = std::env::var("OTEL_RESOURCE_ATTRIBUTES")
        .is_ok_and(|attributes| attributes.contains("service.name="));
    if !env_set("OTEL_SERVICE_NAME") && !named_in_attributes {
        resource = resource.with_service_name("browserd");
    }
    let resource = resource
        .with_attribute(opentelemetry::KeyValue::new(
            "browserd.role",
            role.to_owned(),
        ))
        .with_attribute(opentelemetry::KeyValue::new(
            "service.version",
            env!("CARGO_PKG_VERSION"),
        ))
        .build();
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build())
}

/// Installs logging (and trace export when configured) for the process running `role`.
pub fn init(format: LogFormat, role: &str) -> anyhow::Result<Telemetry> {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx::postgres::notice=warn"));
    let ansi = format == LogFormat::Text && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    let fmt: Box<dyn Layer<_> + Send + Sync> = match format {
        LogFormat::Text => fmt.with_filter(filter).boxed(),
        LogFormat::Json => fmt
            .json()
            .event_format(TraceIds(
                tracing_subscriber::fmt::format().json().flatten_event(true),
            ))
            .with_filter(filter)
            .boxed(),
    };
    let provider = if otlp_requested() {
        Some(tracer_provider(role)?)
    } else {
        None
    };
    let otel = provider.as_ref().map(|provider| {
        opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
        // Spans at info and above, whatever RUST_LOG says about logs.
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("browserd"))
            .with_filter(Targets::new().with_default(tracing::Level::INFO))
    });
    let subscriber = tracing_subscriber::registry().with(fmt).with(otel);
    let dispatch = Dispatch::new(subscriber);
    tracing::dispatcher::set_global_default(dispatch.clone())
        .context("installing the tracing subscriber")?;
    let _ = DISPATCH.set(dispatch);
    if provider.is_some() {
        tracing::info!("exporting traces over OTLP/HTTP");
    }
    Ok(Telemetry { provider })
}

/// Installs the Prometheus recorder and describes every metric family of the process.
pub fn init_metrics() {
    let _ = browserd_api::metrics_handle();
    browserd_worker::describe_metrics();
}

/// The W3C trace-context hooks of the api and the worker.
#[derive(Debug, Default)]
pub struct OtelTraceContext;

impl OtelTraceContext {
    fn set_parent(span: &tracing::Span, traceparent: &str, tracestate: Option<&str>) {
        let mut carrier = HashMap::from([("traceparent".to_owned(), traceparent.to_owned())]);
        if let Some(state) = tracestate {
            carrier.insert("tracestate".to_owned(), state.to_owned());
        }
        let parent = TraceContextPropagator::new().extract(&carrier);
        if parent.span().span_context().is_valid() {
            let _ = span.set_parent(parent);
        }
    }

    /// The worker's hook: a task's span becomes a child of the creating request's span.
    pub fn worker_hook() -> browserd_worker::TraceParent {
        Arc::new(|span: &tracing::Span, traceparent: &str| {
            Self::set_parent(span, traceparent, None);
        })
    }
}

impl browserd_api::TraceContext for OtelTraceContext {
    fn set_remote_parent(&self, span: &tracing::Span, traceparent: &str, tracestate: Option<&str>) {
        Self::set_parent(span, traceparent, tracestate);
    }

    fn traceparent(&self, span: &tracing::Span) -> Option<String> {
        let context = span.context();
        if !context.span().span_context().is_valid() {
            return None;
        }
        let mut carrier = HashMap::new();
        TraceContextPropagator::new().inject_context(&context, &mut carrier);
        carrier.remove("traceparent")
    }
}

/// JSON event format with the OpenTelemetry `trace_id` and `span_id` of the event's span as
/// top-level fields.
struct TraceIds(Format<Json>);

impl<S, N> FormatEvent<S, N> for TraceIds
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    Format<Json>: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let ids = ctx.parent_span().and_then(|span| {
            let dispatch = DISPATCH.get()?;
            let context = tracing_opentelemetry::get_otel_context(&span.id(), dispatch)?;
            let span = context.span();
            let span_context = span.span_context();
            span_context
                .is_valid()
                .then(|| (span_context.trace_id(), span_context.span_id()))
        });
        let Some((trace_id, span_id)) = ids else {
            return self.0.format_event(ctx, writer, event);
        };
        let mut line = String::new();
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        match line.strip_prefix('{') {
            Some(rest) => write!(
                writer,
                "{{\"trace_id\":\"{trace_id}\",\"span_id\":\"{span_id}\",{rest}"
            ),
            None => writer.write_str(&line),
        }
    }
}

//! OpenTelemetry traces (SPEC §6 "Traces"): the exporter set up once per process, and
//! the spans of one protected request ([`request`]).
//!
//! **Off unless an OTLP endpoint is configured**: `telemetry.otlp_endpoint` in the file,
//! or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `OTEL_EXPORTER_OTLP_ENDPOINT`
//! (`OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none` turn them off again). When
//! off there is no exporter and no [`Traces`]: each request checks one `Option` and
//! creates nothing, and `traceparent` passes to the upstream untouched.
//!
//! When on, spans are made with the OpenTelemetry API directly (not through `tracing`
//! spans), batched by the SDK's batch processor on its own thread and sent as OTLP over
//! HTTP/protobuf. The standard variables apply: `OTEL_SERVICE_NAME`,
//! `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER`/`_ARG`, `OTEL_EXPORTER_OTLP_HEADERS`,
//! `OTEL_EXPORTER_OTLP_TIMEOUT`, `OTEL_BSP_*`; a `telemetry.*` field set in the file wins
//! over its variable.

pub mod request;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::Resource;

pub use request::{RequestTrace, TraceLink};

/// How long the end of the drain waits for the last batch of spans to be sent.
pub const FLUSH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// The tracer every worker's requests use: cheap to clone (reference counted).
#[derive(Clone, Debug)]
pub struct Traces {
    tracer: SdkTracer,
    propagator: TraceContextPropagator,
}

/// The process's exporter: flushed and stopped by [`Exporter::shutdown`] at the end of
/// the drain, so the spans of the last requests are sent.
pub struct Exporter {
    provider: SdkTracerProvider,
}

/// `telemetry`: where traces go. Each field, when set, wins over its `OTEL_*`
/// variable (as code configuration does in the OpenTelemetry SDKs); unset fields leave
/// the variables in charge (see below).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TelemetryConfig {
    /// OTLP/HTTP base URL (`/v1/traces` is appended), like `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub otlp_endpoint: Option<String>,
    /// Like `OTEL_SERVICE_NAME`.
    pub service_name: Option<String>,
    /// Share of new traces kept (parent-based: a caller's sampling decision is followed),
    /// like `OTEL_TRACES_SAMPLER=parentbased_traceidratio` with this `OTEL_TRACES_SAMPLER_ARG`.
    pub sample_ratio: Option<f64>,
}

/// The OTLP endpoint traces go to, if any: the file's, else the standard variables'.
/// `None` means traces are off.
pub fn endpoint(config: &TelemetryConfig, env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    let set = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    if set("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
        || set("OTEL_TRACES_EXPORTER").is_some_and(|v| v.trim().eq_ignore_ascii_case("none"))
    {
        return None;
    }
    config
        .otlp_endpoint
        .clone()
        .or_else(|| set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
        .or_else(|| set("OTEL_EXPORTER_OTLP_ENDPOINT"))
}

/// Start the exporter when an endpoint is configured (see the module docs); `Ok(None)`
/// when traces are off. Reads the process environment.
pub fn start(config: &TelemetryConfig) -> Result<Option<(Traces, Exporter)>, String> {
    start_with_env(config, &|name| std::env::var(name).ok())
}

/// [`start`] with the variables looked up through `env` (the exporter itself still
/// reads the process environment for its headers, timeout and batch settings).
fn start_with_env(
    config: &TelemetryConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<(Traces, Exporter)>, String> {
    let Some(endpoint) = endpoint(config, env) else {
        return Ok(None);
    };
    if endpoint.trim_start().starts_with("https:") {
        // Only the variables can get here (the file refuses https): don't refuse to
        // start over a cluster-wide variable, but say why nothing is exported.
        tracing::warn!(
            %endpoint,
            "traces off: idem exports OTLP over plain http (to a collector next to it, \
             which forwards over TLS); set OTEL_EXPORTER_OTLP_ENDPOINT to an http:// URL"
        );
        return Ok(None);
    }
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary);
    if let Some(base) = &config.otlp_endpoint {
        // The file's value is a base URL, like OTEL_EXPORTER_OTLP_ENDPOINT.
        exporter = exporter.with_endpoint(format!("{base}/v1/traces"));
    }
    let exporter = exporter
        .build()
        .map_err(|e| format!("cannot set up the OTLP trace exporter for {endpoint}: {e}"))?;
    let mut resource = Resource::builder();
    if let Some(name) = &config.service_name {
        resource = resource.with_service_name(name.clone());
    } else if env("OTEL_SERVICE_NAME").is_none_or(|v| v.trim().is_empty()) {
        resource = resource.with_service_name("idem");
    }
    let mut provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource.build());
    if let Some(ratio) = config.sample_ratio {
        provider = provider.with_sampler(Sampler::ParentBased(Box::new(
            Sampler::TraceIdRatioBased(ratio),
        )));
    }
    let provider = provider.build();
    let tracer = provider.tracer("idem");
    tracing::info!(%endpoint, "exporting traces (OTLP over HTTP/protobuf)");
    let traces = Traces {
        tracer,
        propagator: TraceContextPropagator::new(),
    };
    Ok(Some((traces, Exporter { provider })))
}

impl Exporter {
    /// Send what is batched and stop, within [`FLUSH_TIMEOUT`] (on a blocking-pool
    /// thread): an unreachable collector must not eat the pod's termination grace.
    pub async fn shutdown(self) {
        let provider = self.provider;
        let done =
            tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(FLUSH_TIMEOUT))
                .await;
        if let Ok(Err(e)) = done {
            tracing::warn!(error = %e, "trace exporter shutdown");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn off_unless_an_endpoint_is_set() {
        let none = TelemetryConfig::default();
        assert_eq!(endpoint(&none, &env(&[])), None);
        assert_eq!(
            endpoint(&none, &env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")])),
            None
        );
        let generic = [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4318")];
        assert_eq!(
            endpoint(&none, &env(&generic)).as_deref(),
            Some("http://a:4318")
        );
        let both = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4318"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://b:4318/v1/traces",
            ),
        ];
        let traces_endpoint = endpoint(&none, &env(&both));
        assert_eq!(traces_endpoint.as_deref(), Some("http://b:4318/v1/traces"));
        let file = TelemetryConfig {
            otlp_endpoint: Some("http://file:4318".into()),
            ..Default::default()
        };
        assert_eq!(
            endpoint(&file, &env(&both)).as_deref(),
            Some("http://file:4318")
        );
        for off in [
            ("OTEL_SDK_DISABLED", "true"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ] {
            assert_eq!(endpoint(&file, &env(&[off])), None, "{off:?}");
        }
    }

    /// An https endpoint from the variables (which idem cannot reach: no TLS in its
    /// exporter) leaves traces off rather than failing the start.
    #[test]
    fn an_https_variable_leaves_traces_off() {
        let https = [("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c:4318")];
        let started = start_with_env(&TelemetryConfig::default(), &env(&https));
        assert!(matches!(started, Ok(None)));
    }
}

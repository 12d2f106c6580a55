//! The `telemetry` section: where OpenTelemetry traces go (SPEC §6 "Traces").
//!
//! ```yaml
//! telemetry:
//!   otlp_endpoint: http://otel-collector:4318   # OTLP over HTTP/protobuf; /v1/traces appended
//!   service_name: payments-idem                 # default: OTEL_SERVICE_NAME, else "idem"
//!   sample_ratio: 0.1                           # parent-based; default: OTEL_TRACES_SAMPLER*
//! ```
//! An empty endpoint (e.g. `${OTLP:-}` with the variable unset) leaves traces to the
//! `OTEL_*` variables.

use super::walk::Walker;
use super::yaml::Node;
use super::TelemetryConfig;

pub(crate) fn read(w: &mut Walker<'_>, node: Option<&Node>) -> TelemetryConfig {
    let mut cfg = TelemetryConfig::default();
    let Some(node) = node else { return cfg };
    let f = w.fields(node, "telemetry");
    cfg.otlp_endpoint = w
        .field(&f, "otlp_endpoint", parse_otlp_endpoint)
        .and_then(|a| a.value);
    cfg.service_name = w
        .string(&f, "service_name")
        .map(|a| a.value.trim().to_owned())
        .filter(|name| !name.is_empty());
    cfg.sample_ratio = w.field(&f, "sample_ratio", parse_ratio).map(|a| a.value);
    cfg
}

/// An `http://host[:port][/base]` URL without query, or "" for none. `https` is refused
/// with the reason: this build exports over plain HTTP (a collector next to idem).
pub fn parse_otlp_endpoint(text: &str) -> Result<Option<String>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    let uri: http::Uri = text.parse().map_err(|e| {
        format!("invalid URL {text:?}: {e}; expected e.g. http://otel-collector:4318")
    })?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Err(format!(
                "invalid URL {text:?}: idem exports traces over plain http (to a collector \
                 on the node or in the pod, which forwards over TLS); use http://"
            ))
        }
        _ => {
            return Err(format!(
                "invalid URL {text:?}: expected http://host:port, e.g. http://otel-collector:4318"
            ))
        }
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(format!("invalid URL {text:?}: it has no host"));
    }
    if uri.query().is_some() {
        return Err(format!("invalid URL {text:?}: a query is not supported"));
    }
    Ok(Some(text.trim_end_matches('/').to_owned()))
}

/// A share from 0 to 1.
fn parse_ratio(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        _ => Err(format!(
            "invalid value {text:?}; expected a number from 0 to 1 (0.1 keeps one trace in ten)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    const BASE: &str = "upstream:\n  url: http://127.0.0.1:3000\nroutes: []\n";

    fn load(telemetry: &str) -> Result<Config, String> {
        let text = format!("{BASE}telemetry:\n{telemetry}");
        let env = |name: &str| (name == "COLLECTOR").then(|| "http://c:4318/".to_owned());
        Config::from_yaml_str_with_env(&text, None, env).map_err(|e| e.to_string())
    }

    #[test]
    fn fields_are_read_and_default_to_none() {
        let c = load("  otlp_endpoint: ${COLLECTOR}\n  service_name: pay\n  sample_ratio: 0.25\n")
            .unwrap();
        assert_eq!(c.telemetry.otlp_endpoint.as_deref(), Some("http://c:4318"));
        assert_eq!(c.telemetry.service_name.as_deref(), Some("pay"));
        assert_eq!(c.telemetry.sample_ratio, Some(0.25));
        let c = load("  otlp_endpoint: ${UNSET:-}\n").unwrap();
        assert_eq!(c.telemetry, Default::default());
        let c = Config::from_yaml_str_with_env(BASE, None, |_| None).unwrap();
        assert_eq!(c.telemetry, Default::default());
    }

    #[test]
    fn bad_values_are_reported_with_their_field() {
        for (yaml, field, says) in [
            (
                "  otlp_endpoint: https://c:4318\n",
                "telemetry.otlp_endpoint",
                "plain http",
            ),
            (
                "  otlp_endpoint: grpc://c:4317\n",
                "telemetry.otlp_endpoint",
                "http://",
            ),
            (
                "  otlp_endpoint: http://c:4318/?a=1\n",
                "telemetry.otlp_endpoint",
                "query",
            ),
            (
                "  sample_ratio: 1.5\n",
                "telemetry.sample_ratio",
                "from 0 to 1",
            ),
            (
                "  sample_ratio: half\n",
                "telemetry.sample_ratio",
                "from 0 to 1",
            ),
            (
                "  endpoint: http://c:4318\n",
                "telemetry.endpoint",
                "otlp_endpoint",
            ),
        ] {
            let err = load(yaml).unwrap_err();
            assert!(err.contains(field) && err.contains(says), "{yaml}: {err}");
        }
    }
}

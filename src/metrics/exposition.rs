//! `/metrics` in the format the scraper asks for.
//!
//! prometheus-client writes OpenMetrics text. Prometheus asks for it in its `Accept`
//! header, and only OpenMetrics can carry exemplars. A scraper that does not ask for it
//! (`curl`, agents that parse only the classic format) gets the Prometheus text format
//! 0.0.4, the same samples rewritten line by line:
//! - a counter's `# HELP`/`# TYPE` name its `_total` series, as 0.0.4 expects;
//! - exemplars (` # {trace_id="…"} 0.012`), `# UNIT` and `# EOF` are dropped.

use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exposition {
    OpenMetrics,
    Prometheus,
}

impl Exposition {
    /// OpenMetrics when the `Accept` header lists it with a quality at least that of
    /// the classic text format; the classic format otherwise (no header, `*/*`).
    pub fn negotiate(accept: Option<&str>) -> Exposition {
        let (mut openmetrics, mut text) = (0.0f32, 0.0f32);
        for range in accept.unwrap_or("").split(',') {
            let mut params = range.split(';').map(str::trim);
            let media = params.next().unwrap_or("").to_ascii_lowercase();
            let quality = params
                .filter_map(|p| p.strip_prefix("q="))
                .find_map(|q| q.parse::<f32>().ok())
                .unwrap_or(1.0);
            match media.as_str() {
                "application/openmetrics-text" => openmetrics = openmetrics.max(quality),
                "text/plain" | "text/*" | "*/*" => text = text.max(quality),
                _ => {}
            }
        }
        if openmetrics > 0.0 && openmetrics >= text {
            Exposition::OpenMetrics
        } else {
            Exposition::Prometheus
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Exposition::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Exposition::Prometheus => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

pub fn render(registry: &Registry, exposition: Exposition) -> String {
    let mut open = String::new();
    // Writing to a String cannot fail.
    let _ = encode(&mut open, registry);
    match exposition {
        Exposition::OpenMetrics => open,
        Exposition::Prometheus => to_prometheus_text(&open),
    }
}

/// Rewrites OpenMetrics text (as prometheus-client writes it) into format 0.0.4.
fn to_prometheus_text(open: &str) -> String {
    let mut out = String::with_capacity(open.len());
    let mut lines = open.lines().peekable();
    while let Some(line) = lines.next() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(help) = line.strip_prefix("# HELP ") {
            // prometheus-client writes HELP right before TYPE: a counter's pair is renamed.
            let name = help.split(' ').next().unwrap_or("");
            let is_counter = lines
                .peek()
                .is_some_and(|next| *next == format!("# TYPE {name} counter"));
            if is_counter {
                out.push_str(&format!("# HELP {name}_total{}\n", &help[name.len()..]));
                out.push_str(&format!("# TYPE {name}_total counter\n"));
                lines.next();
                continue;
            }
        } else if let Some(typed) = line.strip_prefix("# TYPE ") {
            if let Some(name) = typed.strip_suffix(" unknown") {
                out.push_str(&format!("# TYPE {name} untyped\n"));
                continue;
            }
        } else if !line.starts_with('#') {
            out.push_str(without_exemplar(line));
            out.push('\n');
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The sample without its exemplar: the ` # ` after the label set (label values are
/// quoted and may themselves contain `#`, `{` or `}`).
fn without_exemplar(sample: &str) -> &str {
    let bytes = sample.as_bytes();
    let mut i = 0;
    let (mut in_labels, mut in_quotes) = (false, false);
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if in_quotes => i += 1,
            b'"' if in_labels => in_quotes = !in_quotes,
            b'{' if !in_quotes => in_labels = true,
            b'}' if !in_quotes => in_labels = false,
            b'#' if !in_labels && i > 0 && bytes[i - 1] == b' ' => return &sample[..i - 1],
            _ => {}
        }
        i += 1;
    }
    sample
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_asks_for_openmetrics_curl_gets_text() {
        let prometheus = "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2";
        assert_eq!(
            Exposition::negotiate(Some(prometheus)),
            Exposition::OpenMetrics
        );
        assert_eq!(Exposition::negotiate(Some("*/*")), Exposition::Prometheus);
        assert_eq!(Exposition::negotiate(None), Exposition::Prometheus);
        assert_eq!(
            Exposition::negotiate(Some(
                "text/plain;version=0.0.4;q=0.9,application/openmetrics-text;q=0.5"
            )),
            Exposition::Prometheus
        );
        assert_eq!(
            Exposition::negotiate(Some("application/openmetrics-text; q=0")),
            Exposition::Prometheus
        );
    }

    #[test]
    fn openmetrics_is_rewritten_line_by_line() {
        let open = "# HELP idem_requests Requests by route and outcome.\n\
# TYPE idem_requests counter\n\
idem_requests_total{route=\"a # {b}\",outcome=\"replayed\"} 3\n\
# HELP idem_up Up.\n\
# TYPE idem_up gauge\n\
# UNIT idem_up seconds\n\
idem_up 1\n\
# TYPE idem_x unknown\n\
idem_x_bucket{le=\"0.1\"} 1 # {trace_id=\"ab\"} 0.05\n\
# EOF\n";
        let text = to_prometheus_text(open);
        assert_eq!(
            text,
            "# HELP idem_requests_total Requests by route and outcome.\n\
# TYPE idem_requests_total counter\n\
idem_requests_total{route=\"a # {b}\",outcome=\"replayed\"} 3\n\
# HELP idem_up Up.\n\
# TYPE idem_up gauge\n\
idem_up 1\n\
# TYPE idem_x untyped\n\
idem_x_bucket{le=\"0.1\"} 1\n"
        );
    }
}

//! The request plan of a run: `--target`, the method, the templates and the headers,
//! validated once before the first request so that a bad argument is an exit 2 up
//! front, not an error per request in the report.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, Request, Uri};
use http_body_util::Full;

use super::template::{IntentVars, LoadTemplate};
use super::{LoadtestArgs, UsageError};

/// Everything a request of the run needs, parsed once.
pub(super) struct Plan {
    method: Method,
    base: String,
    path: LoadTemplate,
    body: LoadTemplate,
    constant_body: Option<Bytes>,
    headers: Vec<(HeaderName, LoadTemplate)>,
    pub(super) key_header: Option<HeaderName>,
    pub(super) run: String,
    pub(super) timeout: Duration,
}

impl Plan {
    pub(super) fn new(args: &LoadtestArgs, run: String) -> Result<Plan, UsageError> {
        let base = args.target.trim_end_matches('/').to_owned();
        let uri: Uri = base
            .parse()
            .map_err(|e| UsageError(format!("--target {base}: {e}")))?;
        if uri.scheme_str() != Some("http") || uri.authority().is_none() {
            return Err(UsageError(format!(
                "--target {base}: give an http://host:port URL"
            )));
        }
        if !args.path_template.starts_with('/') {
            return Err(UsageError("--path-template must start with /".into()));
        }
        let method = Method::from_bytes(args.method.as_bytes())
            .map_err(|_| UsageError(format!("--method {}: not a method", args.method)))?;
        let mut headers = Vec::new();
        for h in &args.headers {
            let (name, value) = h
                .split_once(':')
                .ok_or_else(|| UsageError(format!("--header {h}: expected K:V")))?;
            let name = HeaderName::from_bytes(name.trim().as_bytes())
                .map_err(|_| UsageError(format!("--header {h}: bad header name")))?;
            headers.push((name, LoadTemplate::parse(value.trim())));
        }
        let key_header = match args.key_header.trim() {
            "" => None,
            name => Some(
                HeaderName::from_bytes(name.as_bytes())
                    .map_err(|_| UsageError(format!("--key-header {name}: bad header name")))?,
            ),
        };
        let body = LoadTemplate::parse(&args.body);
        let constant_body = body
            .is_constant()
            .then(|| Bytes::from(args.body.clone().into_bytes()));
        Ok(Plan {
            method,
            base,
            path: LoadTemplate::parse(&args.path_template),
            body,
            constant_body,
            headers,
            key_header,
            run,
            timeout: args.timeout,
        })
    }

    pub(super) fn key(&self, i: u64) -> String {
        format!("lt-{}-{i}", self.run)
    }

    pub(super) fn request(&self, intent: IntentVars<'_>) -> Result<Request<Full<Bytes>>, String> {
        let uri = format!("{}{}", self.base, self.path.render(intent));
        let mut req = Request::builder().method(self.method.clone()).uri(uri);
        if let Some(name) = &self.key_header {
            req = req.header(name, intent.key);
        }
        let body = match &self.constant_body {
            Some(b) => b.clone(),
            None => Bytes::from(self.body.render(intent)),
        };
        if !body.is_empty() {
            req = req.header(http::header::CONTENT_TYPE, "application/json");
        }
        for (name, value) in &self.headers {
            let value = HeaderValue::from_str(&value.render(intent))
                .map_err(|_| format!("header {name}: value is not a valid header value"))?;
            req = req.header(name, value);
        }
        req.body(Full::new(body)).map_err(|e| e.to_string())
    }
}

pub(super) fn valid_run_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

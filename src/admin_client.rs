//! The client side of `idem keys`: one request to the admin API.

use bytes::Bytes;
use http::{header, Method, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};

use crate::cli::KeysArgs;

/// Send GET/DELETE `/v1/keys/{route}/{key}`; returns the status and body text.
pub async fn key_request(
    args: &KeysArgs,
    method: Method,
    key: &str,
    with_body: bool,
) -> Result<(StatusCode, String), String> {
    if args.route.is_empty() {
        return Err("--route NAME is required".to_owned());
    }
    let enc = |s: &str| utf8_percent_encode(s, NON_ALPHANUMERIC).to_string();
    let mut uri = format!(
        "{}/v1/keys/{}/{}",
        args.admin.trim_end_matches('/'),
        enc(&args.route),
        enc(key)
    );
    let mut query = Vec::new();
    if !args.scope.is_empty() {
        query.push(format!("scope={}", enc(&args.scope)));
    }
    if with_body {
        query.push("body=true".to_owned());
    }
    if !query.is_empty() {
        uri = format!("{uri}?{}", query.join("&"));
    }
    let mut request = Request::builder().method(method).uri(&uri);
    if let Some(token) = &args.token {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let request = request
        .body(Empty::<Bytes>::new())
        .map_err(|e| format!("bad admin URL {uri}: {e}"))?;
    let client = Client::builder(TokioExecutor::new()).build_http();
    let response = client
        .request(request)
        .await
        .map_err(|e| format!("admin API at {} unreachable: {e}", args.admin))?;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

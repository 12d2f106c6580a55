//! Answering a repeat from the stored outcome.

use http::{header, Response, StatusCode};

use super::body::{full, ProxyBody};
use super::headers::{IDEMPOTENT_REPLAYED, TRUE};
use super::problem::{self, Problem};
use crate::store::StoredResponse;

/// The stored response with `Idempotent-Replayed: true`, or 409 `response_not_stored`
/// when the body was too large to keep.
pub fn replay(stored: &StoredResponse) -> Result<Response<ProxyBody>, Problem> {
    let Some(body) = &stored.body else {
        return Err(problem::response_not_stored(stored.status));
    };
    let mut response = Response::new(full(body.clone()));
    *response.status_mut() = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::OK);
    let headers = response.headers_mut();
    headers.reserve(stored.headers.len() + 1);
    for (name, value) in &stored.headers {
        // The length is recomputed from the stored body.
        if name != header::CONTENT_LENGTH {
            headers.append(name.clone(), value.clone());
        }
    }
    headers.insert(IDEMPOTENT_REPLAYED, TRUE);
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http::HeaderValue;

    #[test]
    fn replay_marks_and_restores_headers() {
        let stored = StoredResponse {
            status: 201,
            headers: vec![(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            body: Some(Bytes::from_static(b"{}")),
        };
        let r = replay(&stored).unwrap();
        assert_eq!(r.status(), 201);
        assert_eq!(r.headers()["idempotent-replayed"], "true");
        assert_eq!(r.headers()[header::CONTENT_TYPE], "application/json");
    }

    #[test]
    fn unstored_body_is_409_naming_the_status() {
        let stored = StoredResponse {
            status: 200,
            headers: vec![],
            body: None,
        };
        let p = replay(&stored).unwrap_err();
        assert_eq!(p.status, 409);
        assert!(p.detail.contains("200"));
    }
}

//! The HTTP client every request to an object store goes through: each attempt (a retry is
//! one) is counted by method and status and timed to its answer's headers (`crate::metrics`),
//! and with `-v` logged: method, path, range, status, time.

use std::future::Future;
use std::pin::Pin;
use std::time::Instant;

use object_store::ClientOptions;
use object_store::client::{HttpClient, HttpConnector, HttpError, HttpRequest, HttpResponse, HttpService, ReqwestConnector};

#[derive(Debug, Default)]
pub struct MeteredConnector;

impl HttpConnector for MeteredConnector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        Ok(HttpClient::new(Metered(ReqwestConnector::default().connect(options)?)))
    }
}

#[derive(Debug)]
struct Metered(HttpClient);

// The signature `#[async_trait]` gives `HttpService::call` (object_store declares it so).
impl HttpService for Metered {
    fn call<'a, 'f>(&'a self, req: HttpRequest) -> Pin<Box<dyn Future<Output = Result<HttpResponse, HttpError>> + Send + 'f>>
    where
        'a: 'f,
        Self: 'f,
    {
        Box::pin(async move {
            let method = req.method().clone();
            // The path only: a query may carry a signature or a SAS token.
            let path = req.uri().path().to_string();
            let range = req.headers().get(http::header::RANGE).and_then(|v| v.to_str().ok()).map(str::to_string);
            let started = Instant::now();
            let mut answer = self.0.execute(req).await;
            let took = started.elapsed();
            if let Ok(response) = &mut answer
                && range.is_some()
            {
                partial_as_partial(response);
            }
            let status = answer.as_ref().ok().map(|r| r.status().as_u16());
            crate::metrics::http_attempt(method.as_str(), status, took);
            tracing::debug!(
                method = %method,
                path,
                range = range.as_deref().unwrap_or("whole"),
                status = %status.map_or_else(|| "none".to_string(), |s| s.to_string()),
                took_us = took.as_micros() as u64,
                "store request"
            );
            answer
        })
    }
}

/// A server that answers a range with the bytes asked for, said so by its `Content-Range`, under
/// `200 OK` rather than `206 Partial Content` (`rclone serve s3` 1.75): its answer is taken as
/// the partial one it is, not as a server that ignores ranges (which would have every value
/// read whole). Only a `Content-Range` that names a part of the value counts: one that names
/// all of it (or no length) leaves the answer a whole one, read as such.
fn partial_as_partial(response: &mut HttpResponse) {
    let part = |v: &str| -> Option<bool> {
        let (range, total) = v.strip_prefix("bytes ")?.split_once('/')?;
        let (first, last) = range.split_once('-')?;
        let (first, last, total) = (first.parse::<u64>().ok()?, last.parse::<u64>().ok()?, total.parse::<u64>().ok()?);
        Some(first <= last && last < total && (first > 0 || last + 1 < total))
    };
    let names_part = response.headers().get(http::header::CONTENT_RANGE).and_then(|v| v.to_str().ok()).and_then(part).unwrap_or(false);
    if response.status() == http::StatusCode::OK && names_part {
        *response.status_mut() = http::StatusCode::PARTIAL_CONTENT;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, content_range: Option<&str>) -> HttpResponse {
        let mut r = http::Response::builder().status(status);
        if let Some(c) = content_range {
            r = r.header(http::header::CONTENT_RANGE, c);
        }
        r.body(object_store::client::HttpResponseBody::from(bytes::Bytes::new())).unwrap()
    }

    #[test]
    fn a_range_answered_under_200_with_its_content_range_is_partial() {
        let mut ok = answer(200, Some("bytes 99868-99999/100000"));
        partial_as_partial(&mut ok);
        assert_eq!(ok.status(), 206);
        // Without a Content-Range, the server did ignore the range; other statuses are left.
        for (status, range) in [
            (200, None),
            (200, Some("bytes */100000")),
            // All of the value, or a length not given: a whole answer.
            (200, Some("bytes 0-9/10")),
            (200, Some("bytes 0-9/*")),
            (200, Some("bytes 9-0/10")),
            (206, Some("bytes 0-9/10")),
            (416, Some("bytes */10")),
        ] {
            let mut r = answer(status, range);
            partial_as_partial(&mut r);
            assert_eq!(r.status(), status, "{range:?}");
        }
    }
}

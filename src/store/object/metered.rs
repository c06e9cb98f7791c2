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
            let answer = self.0.execute(req).await;
            let took = started.elapsed();
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

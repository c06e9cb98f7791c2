//! A failed request in words a user can act on, and as the error (and errno) the core takes:
//! the cause an S3 error document or the innermost error names, a refused condition as another
//! writer's change.

use super::{ObjectStore, TRANSFER_BASE};
use crate::error::lock;
use crate::{Error, Result};

/// What went wrong, in one line a user can act on.
pub(super) fn explain(e: &object_store::Error) -> String {
    let text = e.to_string();
    // An S3 error document names the cause: `<Code>…</Code><Message>…</Message>`.
    let tag = |name: &str| {
        let open = format!("<{name}>");
        let start = text.find(&open)? + open.len();
        Some(text[start..].split('<').next()?.to_string())
    };
    let text = match (tag("Code"), tag("Message")) {
        (Some(code), Some(message)) => format!("{code}: {message}"),
        _ => text,
    };
    let lower = text.to_ascii_lowercase();
    if lower.contains("nosuchbucket") {
        return "no such bucket".into();
    }
    if matches!(e, object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. })
        // The status as object_store words it ("status 403 Forbidden"), not any "403" (a key or
        // a URL in the message may hold one).
        || lower.contains("403 forbidden")
        || lower.contains("accessdenied")
        || lower.contains("signaturedoesnotmatch")
        || lower.contains("invalidaccesskeyid")
    {
        return format!("access denied (check the credentials, region and endpoint): {}", first_line(&text));
    }
    // The innermost cause says why a request could not be sent ("Connection refused", "invalid
    // peer certificate: UnknownIssuer"); the outer ones only that it was not.
    let mut cause: &dyn std::error::Error = e;
    while let Some(inner) = cause.source() {
        cause = inner;
    }
    let cause = first_line(&cause.to_string());
    if cause.to_ascii_lowercase().contains("certificate") {
        return format!("a server's TLS certificate is not trusted (a private CA goes in SSL_CERT_FILE): {cause}");
    }
    if cause.to_ascii_lowercase().contains("timed out") {
        return format!(
            "no whole answer within {} s (a request's whole time is bounded, its body's included, not only each wait): {cause}",
            TRANSFER_BASE.as_secs()
        );
    }
    if lower.contains("error sending request") || lower.contains("connection refused") || lower.contains("dns error") {
        return format!("cannot reach the server (check the endpoint): {cause}");
    }
    first_line(&text)
}

/// How long a key whose read ran out of its whole time fails its reads at once: the kernel
/// retries a failed read once, and a reader should wait one bound, not two.
const TIMED_OUT_FOR: std::time::Duration = std::time::Duration::from_secs(10);

/// The most keys remembered as timed out.
const TIMED_OUT_KEYS: usize = 4096;

impl ObjectStore {
    /// Fail at once a read of a key whose read timed out just now.
    pub(super) fn refuse_timed_out(&self, key: &str) -> Result<()> {
        match lock(&self.timed_out).get(key) {
            Some(at) if at.elapsed() < TIMED_OUT_FOR => Err(Error::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "{key}: its read ran out of its whole time {} s ago (a request's whole time is bounded); not asked again for {} s",
                    at.elapsed().as_secs(),
                    TIMED_OUT_FOR.as_secs()
                ),
            ))),
            _ => Ok(()),
        }
    }
}

/// A range request the server refused as past the value's end (416, InvalidRange).
pub(super) fn is_unsatisfiable_range(e: &object_store::Error) -> bool {
    let text = e.to_string().to_ascii_lowercase();
    // By the status's words, not any "416" (a key or a URL in the message may hold one).
    text.contains("range not satisfiable") || text.contains("invalidrange") || text.contains("wanted range starting")
}

/// Whether the server answered a range request with the whole value (object_store says so
/// in these words: its HTTP store, and its client for the others).
pub(super) fn ignores_ranges(e: &object_store::Error) -> bool {
    let text = e.to_string();
    text.contains("Range request not supported") || text.contains("non-partial response")
}

pub(super) fn first_line(s: &str) -> String {
    let s = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if s.len() > 400 { format!("{}…", &s[..s.floor_char_boundary(400)]) } else { s }
}

impl ObjectStore {
    /// A failed request, after the client's retries: logged with the key and the last cause.
    pub(super) fn failed(&self, op: &str, key: &str, e: object_store::Error) -> Error {
        let why = explain(&e);
        // A refused condition is another writer's change, which the caller merges or reports:
        // nothing went wrong here.
        if matches!(e, object_store::Error::Precondition { .. } | object_store::Error::AlreadyExists { .. }) {
            tracing::debug!(store = %self.location, key, "{op} refused: {why}");
        } else {
            tracing::warn!(store = %self.location, key, "{op} failed: {why}");
        }
        if why.starts_with("no whole answer within") || e.to_string().contains("no whole answer within") {
            let mut timed_out = lock(&self.timed_out);
            // Bounded: a server that times out on every key forgets the oldest first.
            if timed_out.len() >= TIMED_OUT_KEYS {
                timed_out.retain(|_, at| at.elapsed() < TIMED_OUT_FOR);
                if timed_out.len() >= TIMED_OUT_KEYS {
                    timed_out.clear();
                }
            }
            timed_out.insert(key.to_string(), std::time::Instant::now());
        }
        match e {
            object_store::Error::Precondition { .. } | object_store::Error::AlreadyExists { .. } => {
                Error::refused(key, "changed by another writer since this mount read it; not overwritten")
            }
            object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. } => {
                Error::Io(std::io::Error::from_raw_os_error(libc::EACCES))
            }
            _ => Error::Io(std::io::Error::other(format!("{op} {key}: {why}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_that_was_not_sent_is_explained_by_its_innermost_cause() {
        /// An outer error that only says a request to a URL failed, over the cause.
        #[derive(Debug)]
        struct NotSent(&'static str, std::io::Error);
        impl std::fmt::Display for NotSent {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "Error performing HEAD {} - HTTP error: error sending request", self.0)
            }
        }
        impl std::error::Error for NotSent {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.1)
            }
        }
        let not_sent = |url: &'static str, cause: &str| object_store::Error::Generic {
            store: "S3",
            source: Box::new(NotSent(url, std::io::Error::other(cause.to_string()))),
        };
        let untrusted = explain(&not_sent("https://h/b/p/zarr.json", "invalid peer certificate: UnknownIssuer"));
        assert_eq!(
            untrusted,
            "a server's TLS certificate is not trusted (a private CA goes in SSL_CERT_FILE): invalid peer certificate: UnknownIssuer"
        );
        let refused = explain(&not_sent("https://h/b/p/zarr.json", "Connection refused (os error 111)"));
        assert_eq!(refused, "cannot reach the server (check the endpoint): Connection refused (os error 111)");
        // A "403" in the URL is not a refusal (a CI run's random prefix held one).
        let in_url = explain(&not_sent("https://127.0.0.1:42333/b/http-486b4038/zarr.json", "invalid peer certificate: UnknownIssuer"));
        assert!(in_url.starts_with("a server's TLS certificate is not trusted"), "{in_url}");
        let forbidden = object_store::Error::Generic { store: "HTTP", source: "Client error with status 403 Forbidden: No Body".into() };
        assert!(explain(&forbidden).starts_with("access denied"), "{}", explain(&forbidden));
        // Likewise a "416" in the URL is not a range past the end.
        assert!(!is_unsatisfiable_range(&not_sent("https://h/b/c/416/0", "Connection reset by peer")));
        let past_end =
            object_store::Error::Generic { store: "HTTP", source: "Client error with status 416 Range Not Satisfiable: No Body".into() };
        assert!(is_unsatisfiable_range(&past_end));
    }
}

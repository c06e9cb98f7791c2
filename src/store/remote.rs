//! Where an object store is and how to reach it, as the command line gives it. Kept apart from
//! the client (`object.rs`, behind the `object-store` feature) so that every build parses the
//! same command line.

/// Where an object store is, as given on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RemoteLocation {
    /// `s3://bucket/prefix` (or `s3a://`).
    S3 { bucket: String, prefix: String },
    /// `http(s)://host/path`: read-only, no listing.
    Http { url: String },
}

impl RemoteLocation {
    /// The remote location `s` names, or `None` when it is a local path.
    pub fn parse(s: &str) -> Option<std::result::Result<RemoteLocation, String>> {
        if let Some(rest) = s.strip_prefix("s3://").or_else(|| s.strip_prefix("s3a://")) {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            let prefix = prefix.trim_matches('/').to_string();
            // S3 bucket names are 3 to 63 characters.
            if bucket.len() < 3 || bucket.len() > 63 {
                return Some(Err(format!("{s}: a bucket name has 3 to 63 characters")));
            }
            return Some(Ok(RemoteLocation::S3 { bucket: bucket.to_string(), prefix }));
        }
        if s.starts_with("http://") || s.starts_with("https://") {
            return Some(Ok(RemoteLocation::Http { url: s.trim_end_matches('/').to_string() }));
        }
        None
    }

    pub fn read_only(&self) -> bool {
        matches!(self, RemoteLocation::Http { .. })
    }
}

impl std::fmt::Display for RemoteLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RemoteLocation::S3 { bucket, prefix } if prefix.is_empty() => write!(f, "s3://{bucket}"),
            RemoteLocation::S3 { bucket, prefix } => write!(f, "s3://{bucket}/{prefix}"),
            RemoteLocation::Http { url } => write!(f, "{url}"),
        }
    }
}

/// What may be set on the command line for object stores; the rest comes from the
/// conventional AWS environment (`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`, `AWS_ALLOW_HTTP`, ...)
/// and the shared credentials file of `AWS_PROFILE`.
#[derive(Clone, Debug, Default)]
pub struct RemoteOptions {
    pub endpoint: Option<String>,
    pub region: Option<String>,
    /// Anonymous requests (public buckets).
    pub no_sign_request: bool,
    /// `https://bucket.host/...` rather than `https://host/bucket/...`.
    pub virtual_hosted: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_parse() {
        let s3 = |b: &str, p: &str| Some(Ok(RemoteLocation::S3 { bucket: b.into(), prefix: p.into() }));
        assert_eq!(RemoteLocation::parse("s3://bkt/a/b.zarr/"), s3("bkt", "a/b.zarr"));
        assert_eq!(RemoteLocation::parse("s3a://bkt"), s3("bkt", ""));
        assert!(matches!(RemoteLocation::parse("s3://ab/x"), Some(Err(_))));
        assert_eq!(RemoteLocation::parse("https://h/s.zarr/"), Some(Ok(RemoteLocation::Http { url: "https://h/s.zarr".into() })));
        assert_eq!(RemoteLocation::parse("/tmp/s3://x"), None);
        assert_eq!(RemoteLocation::parse("s3://bkt/a").unwrap().unwrap().to_string(), "s3://bkt/a");
    }
}

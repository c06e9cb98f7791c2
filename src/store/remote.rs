//! Where an object store is and how to reach it, as the command line gives it. Kept apart from
//! the client (`object.rs`, behind the `object-store` feature) so that every build parses the
//! same command line.

/// Where an object store is, as given on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RemoteLocation {
    /// `s3://bucket/prefix` (or `s3a://`).
    S3 { bucket: String, prefix: String },
    /// `gs://bucket/prefix` (or `gcs://`): Google Cloud Storage.
    Gcs { bucket: String, prefix: String },
    /// `az://container/prefix` (or `azure://`), or
    /// `abfs[s]://container@account.dfs.core.windows.net/prefix`: Azure Blob Storage. Without an
    /// account in the URL, the account is `AZURE_STORAGE_ACCOUNT_NAME`'s.
    Azure { container: String, account: Option<String>, prefix: String },
    /// `http(s)://host/path`: read-only, no listing.
    Http { url: String },
}

impl RemoteLocation {
    /// The remote location `s` names, or `None` when it is a local path.
    pub fn parse(s: &str) -> Option<std::result::Result<RemoteLocation, String>> {
        let scheme = |names: &[&str]| names.iter().find_map(|n| s.strip_prefix(n)).map(|rest| rest.split_once('/').unwrap_or((rest, "")));
        let prefix = |p: &str| p.trim_matches('/').to_string();
        // Bucket names (S3, GCS) and container names (Azure) are 3 to 63 characters.
        let named = |bucket: &str| {
            if (3..=63).contains(&bucket.len()) {
                Ok(bucket.to_string())
            } else {
                Err(format!("{s}: a bucket name has 3 to 63 characters"))
            }
        };
        if let Some((bucket, p)) = scheme(&["s3://", "s3a://"]) {
            return Some(named(bucket).map(|bucket| RemoteLocation::S3 { bucket, prefix: prefix(p) }));
        }
        if let Some((bucket, p)) = scheme(&["gs://", "gcs://"]) {
            return Some(named(bucket).map(|bucket| RemoteLocation::Gcs { bucket, prefix: prefix(p) }));
        }
        if let Some((container, p)) = scheme(&["az://", "azure://"]) {
            return Some(named(container).map(|container| RemoteLocation::Azure { container, account: None, prefix: prefix(p) }));
        }
        if let Some((authority, p)) = scheme(&["abfs://", "abfss://"]) {
            let parsed = match authority.split_once('@') {
                Some((container, host)) => named(container).and_then(|container| {
                    let account = host.split('.').next().filter(|a| !a.is_empty()).ok_or_else(|| format!("{s}: no account after @"))?;
                    Ok(RemoteLocation::Azure { container, account: Some(account.to_string()), prefix: prefix(p) })
                }),
                None => named(authority).map(|container| RemoteLocation::Azure { container, account: None, prefix: prefix(p) }),
            };
            return Some(parsed);
        }
        if s.starts_with("http://") || s.starts_with("https://") {
            return Some(Ok(RemoteLocation::Http { url: s.trim_end_matches('/').to_string() }));
        }
        None
    }

    pub fn read_only(&self) -> bool {
        matches!(self, RemoteLocation::Http { .. })
    }

    /// The prefix (or URL path) of the location, to split and extend.
    fn path_mut(&mut self) -> &mut String {
        match self {
            RemoteLocation::S3 { prefix, .. } | RemoteLocation::Gcs { prefix, .. } | RemoteLocation::Azure { prefix, .. } => prefix,
            RemoteLocation::Http { url } => url,
        }
    }

    /// The bucket, container or host this location is in, and its path there (`s3://b/x/y.nc`:
    /// `s3://b` and `x/y.nc`): how a reference set's target URL is read.
    pub fn root_and_path(&self) -> (RemoteLocation, String) {
        let mut root = self.clone();
        let path = match &mut root {
            RemoteLocation::S3 { prefix, .. } | RemoteLocation::Gcs { prefix, .. } | RemoteLocation::Azure { prefix, .. } => {
                std::mem::take(prefix)
            }
            RemoteLocation::Http { url } => {
                let host_at = url.find("://").map_or(0, |i| i + 3);
                match url[host_at..].find('/') {
                    Some(j) => {
                        let path = url[host_at + j + 1..].to_string();
                        url.truncate(host_at + j);
                        path
                    }
                    None => String::new(),
                }
            }
        };
        (root, path)
    }

    /// The location's last path part (an object's name) and the location of what holds it.
    pub fn split_last(&self) -> Option<(RemoteLocation, String)> {
        let mut parent = self.clone();
        let path = parent.path_mut();
        let (dir, name) = match path.rsplit_once('/') {
            Some((dir, name)) => (dir.to_string(), name.to_string()),
            None if !matches!(self, RemoteLocation::Http { .. }) => (String::new(), path.clone()),
            None => return None,
        };
        // An URL keeps its host: `https://h/x.zip` is the object `x.zip` of `https://h`.
        if name.is_empty() || (matches!(self, RemoteLocation::Http { .. }) && dir.ends_with('/')) {
            return None;
        }
        *path = dir;
        Some((parent, name))
    }

    /// The location of `path` beneath this one.
    pub fn beneath(&self, path: &str) -> RemoteLocation {
        let mut out = self.clone();
        let p = out.path_mut();
        *p = if p.is_empty() { path.to_string() } else { format!("{p}/{path}") };
        out
    }
}

impl std::fmt::Display for RemoteLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RemoteLocation::S3 { bucket, prefix } if prefix.is_empty() => write!(f, "s3://{bucket}"),
            RemoteLocation::Gcs { bucket, prefix } if prefix.is_empty() => write!(f, "gs://{bucket}"),
            RemoteLocation::Azure { container, account: None, prefix } if prefix.is_empty() => write!(f, "az://{container}"),
            RemoteLocation::S3 { bucket, prefix } => write!(f, "s3://{bucket}/{prefix}"),
            RemoteLocation::Gcs { bucket, prefix } => write!(f, "gs://{bucket}/{prefix}"),
            RemoteLocation::Azure { container, account: None, prefix } => write!(f, "az://{container}/{prefix}"),
            RemoteLocation::Azure { container, account: Some(a), prefix } => {
                write!(f, "abfss://{container}@{a}.dfs.core.windows.net/{prefix}")
            }
            RemoteLocation::Http { url } => write!(f, "{url}"),
        }
    }
}

/// What may be set on the command line for object stores; the rest comes from each cloud's
/// conventional environment: AWS's (`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`, `AWS_ALLOW_HTTP`,
/// ..., and the shared credentials file of `AWS_PROFILE`), Google's
/// (`GOOGLE_APPLICATION_CREDENTIALS`, `GOOGLE_SERVICE_ACCOUNT`, ...) and Azure's
/// (`AZURE_STORAGE_ACCOUNT_NAME`, `AZURE_STORAGE_ACCOUNT_KEY`, `AZURE_STORAGE_USE_EMULATOR`, ...).
#[derive(Clone, Debug, Default)]
pub struct RemoteOptions {
    pub endpoint: Option<String>,
    pub region: Option<String>,
    /// Anonymous requests (public buckets).
    pub no_sign_request: bool,
    /// `https://bucket.host/...` rather than `https://host/bucket/...`.
    pub virtual_hosted: bool,
    /// How long what a listing showed is trusted (the mount's metadata TTL; none if zero).
    pub metadata_ttl: std::time::Duration,
    /// Icechunk: follow virtual chunk references into the containers the repository names
    /// (files and objects outside it), which are otherwise refused.
    pub virtual_chunks: bool,
    /// How a walk reads a directory's consolidated metadata (`ReadConsolidated`); without it,
    /// walks fetch every node document, and an HTTP store lists no children.
    pub consolidated: Option<super::ReadConsolidated>,
    /// Walks of a bucket answered from the root's consolidated metadata alone, as zarr-python
    /// answers them: no listing, no node document fetched (read-only mounts).
    pub trust_consolidated: bool,
    /// How a store that rebases commits (Icechunk) merges two writers' versions of a chunk;
    /// without it, such a conflict fails the later commit.
    pub chunk_merge: Option<super::ChunkMerge>,
    /// The bytes of values kept whole for a server that ignores Range requests (the mount's
    /// cache size; 1 GiB if not given).
    pub whole_values_budget: Option<u64>,
    /// Reference sets: prefixes (local directories) their targets may lie beneath, besides the
    /// set's own directory.
    pub targets: Vec<String>,
    /// How a reference set compressed by fsspec is read (`Uncompress`); without it, only sets
    /// as JSON text are.
    pub uncompress: Option<super::Uncompress>,
}

impl RemoteOptions {
    /// The options of a store that holds another (an archive's, a reference set's): no Zarr
    /// hierarchy of its own, whose consolidated metadata walks would read.
    pub fn for_container(&self) -> RemoteOptions {
        RemoteOptions { trust_consolidated: false, consolidated: None, ..self.clone() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_parse() {
        let s3 = |b: &str, p: &str| Some(Ok(RemoteLocation::S3 { bucket: b.into(), prefix: p.into() }));
        assert_eq!(RemoteLocation::parse("s3://bkt/a/b.zarr/"), s3("bkt", "a/b.zarr"));
        assert_eq!(RemoteLocation::parse("s3a://bkt"), s3("bkt", ""));
        let root_and_path = |u: &str| {
            let (root, path) = RemoteLocation::parse(u).unwrap().unwrap().root_and_path();
            (root.to_string(), path)
        };
        assert_eq!(root_and_path("s3://bkt/x/y.nc"), ("s3://bkt".into(), "x/y.nc".into()));
        assert_eq!(root_and_path("https://h:8/d/f.nc"), ("https://h:8".into(), "d/f.nc".into()));
        assert_eq!(root_and_path("https://h"), ("https://h".into(), String::new()));
        assert!(matches!(RemoteLocation::parse("s3://ab/x"), Some(Err(_))));
        assert_eq!(RemoteLocation::parse("https://h/s.zarr/"), Some(Ok(RemoteLocation::Http { url: "https://h/s.zarr".into() })));
        assert_eq!(RemoteLocation::parse("/tmp/s3://x"), None);
        assert_eq!(RemoteLocation::parse("s3://bkt/a").unwrap().unwrap().to_string(), "s3://bkt/a");
        assert_eq!(
            RemoteLocation::parse("gs://bkt/a/").unwrap().unwrap(),
            RemoteLocation::Gcs { bucket: "bkt".into(), prefix: "a".into() }
        );
        let az = RemoteLocation::Azure { container: "box".into(), account: None, prefix: "p/q".into() };
        assert_eq!(RemoteLocation::parse("az://box/p/q").unwrap().unwrap(), az);
        let abfs = RemoteLocation::parse("abfss://box@acct.dfs.core.windows.net/p").unwrap().unwrap();
        assert_eq!(abfs, RemoteLocation::Azure { container: "box".into(), account: Some("acct".into()), prefix: "p".into() });
        assert_eq!(abfs.to_string(), "abfss://box@acct.dfs.core.windows.net/p");
        // An object's name and what holds it; the path beneath.
        let zip = RemoteLocation::parse("s3://bkt/a/x.zip").unwrap().unwrap();
        assert_eq!(zip.split_last(), Some((RemoteLocation::parse("s3://bkt/a").unwrap().unwrap(), "x.zip".into())));
        let top = RemoteLocation::parse("gs://bkt/x.ozx").unwrap().unwrap();
        assert_eq!(top.split_last().map(|(l, n)| (l.to_string(), n)), Some(("gs://bkt".into(), "x.ozx".into())));
        let http = RemoteLocation::parse("https://h/d/x.zip").unwrap().unwrap();
        assert_eq!(http.split_last().map(|(l, n)| (l.to_string(), n)), Some(("https://h/d".into(), "x.zip".into())));
        assert_eq!(RemoteLocation::parse("https://h").unwrap().unwrap().split_last(), None);
        assert_eq!(top.split_last().unwrap().0.beneath("g/h").to_string(), "gs://bkt/g/h");
    }
}

//! Requests object_store does not make, signed as it signs them: a conditional DELETE (S3's and
//! Azure's `If-Match`, GCS's `x-goog-if-generation-match`), and an S3 bucket listing that
//! survives keys object_store cannot parse. S3 keys may hold `..`, `.` or
//! empty segments (`s/grp/../x`, `s/arr/c//junk`: legal keys sloppy path joins make), and
//! object_store refuses a whole page of a listing for one of them. When that happens the same
//! ListObjectsV2 request is made here, signed as object_store signs, and the keys that cannot
//! name a node or a chunk are passed over (and said once), so that one odd key blocks nothing.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use object_store::UpdateVersion;
use object_store::aws::{AmazonS3, AwsAuthorizer};
use object_store::azure::{AzureAuthorizer, MicrosoftAzure};
use object_store::client::{HttpClient, HttpConnector, HttpRequestBody};
use object_store::gcp::GoogleCloudStorage;

use super::metered::MeteredConnector;

/// Whose credentials sign a request, and how.
pub enum Signer {
    S3 { s3: Arc<AmazonS3>, region: String },
    Azure { azure: Arc<MicrosoftAzure>, account: String },
    Gcs { gcs: Arc<GoogleCloudStorage> },
}

/// How to make the raw requests of one bucket or container.
pub struct RawRequests {
    signer: Signer,
    client: HttpClient,
    /// The URL of the bucket: `https://host/bucket` (path style), `https://bucket.host`
    /// (virtual hosted), `https://account.blob.core.windows.net/container`.
    base: String,
    /// The store's prefix in the bucket (`""`, or ending without `/`).
    prefix: String,
    sign: bool,
    /// The odd keys already said.
    said: Mutex<HashSet<String>>,
}

/// How a conditional DELETE ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Deleted {
    Yes,
    /// Another version stands (412).
    OtherVersion,
    /// Nothing stands (404).
    Absent,
}

/// A listing's names directly under a prefix, split into directories and values.
pub struct Names {
    pub dirs: Vec<String>,
    pub files: Vec<String>,
}

impl RawRequests {
    pub fn new(
        signer: Signer,
        options: &object_store::ClientOptions,
        base: String,
        prefix: String,
        sign: bool,
    ) -> object_store::Result<RawRequests> {
        let client = MeteredConnector.connect(options)?;
        Ok(RawRequests { signer, client, base, prefix, sign, said: Mutex::new(HashSet::new()) })
    }

    /// `request` signed as object_store signs for its cloud (unless unsigned), and its answer.
    async fn execute(&self, mut request: http::Request<HttpRequestBody>) -> Result<(u16, String), String> {
        if self.sign {
            match &self.signer {
                Signer::S3 { s3, region } => {
                    let credential = s3.credentials().get_credential().await.map_err(|e| e.to_string())?;
                    AwsAuthorizer::new(&credential, "s3", region).try_authorize(&mut request, None).map_err(|e| e.to_string())?;
                }
                Signer::Azure { azure, account } => {
                    let credential = azure.credentials().get_credential().await.map_err(|e| e.to_string())?;
                    AzureAuthorizer::new(&credential, account).try_authorize(&mut request).map_err(|e| e.to_string())?;
                }
                Signer::Gcs { gcs } => {
                    let credential = gcs.credentials().get_credential().await.map_err(|e| e.to_string())?;
                    let bearer = http::HeaderValue::from_str(&format!("Bearer {}", credential.bearer)).map_err(|e| e.to_string())?;
                    request.headers_mut().insert(http::header::AUTHORIZATION, bearer);
                }
            }
        }
        let response = self.client.execute(request).await.map_err(|e| e.to_string())?;
        let status = response.status().as_u16();
        let body = response.into_body().bytes().await.map_err(|e| e.to_string())?;
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    }

    /// The names directly under `dir` (relative to the store), odd ones passed over: S3's
    /// ListObjectsV2 (the other clouds' listings have no such failure).
    pub async fn list(&self, dir: &str) -> Result<Names, String> {
        if !matches!(self.signer, Signer::S3 { .. }) {
            return Err("only S3 listings are made raw".into());
        }
        let lead = [self.prefix.as_str(), dir].iter().filter(|p| !p.is_empty()).map(|p| format!("{p}/")).collect::<String>();
        let (mut names, mut token) = (Names { dirs: Vec::new(), files: Vec::new() }, None::<String>);
        loop {
            let mut url = format!("{}?list-type=2&delimiter=%2F&encoding-type=url&prefix={}", self.base, encode(&lead));
            if let Some(t) = &token {
                url.push_str(&format!("&continuation-token={}", encode(t)));
            }
            let request = http::Request::builder().method("GET").uri(&url).body(HttpRequestBody::empty()).map_err(|e| e.to_string())?;
            let (status, body) = self.execute(request).await?;
            if !(200..300).contains(&status) {
                return Err(format!("LIST {lead}: {status}: {}", body.chars().take(300).collect::<String>()));
            }
            for key in tags(&body, "Key").map(|k| decode(&k)) {
                self.take(&lead, &key, false, &mut names);
            }
            for prefixes in tags(&body, "CommonPrefixes") {
                for p in tags(&prefixes, "Prefix").map(|p| decode(&p)) {
                    self.take(&lead, &p, true, &mut names);
                }
            }
            token = tags(&body, "NextContinuationToken").next().filter(|_| tags(&body, "IsTruncated").next().as_deref() == Some("true"));
            if token.is_none() {
                return Ok(names);
            }
        }
    }

    /// DELETE of `key` (relative to the store) only while it is at `version`: its ETag
    /// (`If-Match`, S3 and Azure) or its generation (GCS).
    pub async fn delete_if_match(&self, key: &str, version: &UpdateVersion) -> Result<Deleted, String> {
        let full = [self.prefix.as_str(), key].iter().filter(|p| !p.is_empty()).copied().collect::<Vec<_>>().join("/");
        let path: Vec<String> = full.split('/').map(encode).collect();
        let url = format!("{}/{}", self.base, path.join("/"));
        let (header, value) = match self.signer {
            Signer::Gcs { .. } => ("x-goog-if-generation-match", &version.version),
            Signer::S3 { .. } | Signer::Azure { .. } => ("If-Match", &version.e_tag),
        };
        let value = value.as_deref().ok_or_else(|| format!("{key}: the server gave no {header} value to delete it over"))?;
        let request = http::Request::builder()
            .method("DELETE")
            .uri(&url)
            .header(header, value)
            .body(HttpRequestBody::empty())
            .map_err(|e| e.to_string())?;
        match self.execute(request).await? {
            // Azure answers a deletion 202.
            (200 | 202 | 204, _) => Ok(Deleted::Yes),
            (412, _) => Ok(Deleted::OtherVersion),
            (404, _) => Ok(Deleted::Absent),
            (status, body) => Err(format!("DELETE {key} ({header}): {status}: {}", body.chars().take(300).collect::<String>())),
        }
    }

    /// Add the name `key` stands for under `lead` to `names`, unless it cannot name anything.
    fn take(&self, lead: &str, key: &str, is_dir: bool, names: &mut Names) {
        let rest = key.strip_prefix(lead).unwrap_or(key);
        let name = if is_dir { rest.strip_suffix('/').unwrap_or(rest) } else { rest };
        if name.is_empty() || name == "." || name == ".." || name.contains('/') {
            if crate::error::lock(&self.said).insert(key.to_string()) {
                tracing::warn!(key, "a key no node or chunk can have (an empty, . or .. part): passed over");
            }
            return;
        }
        if is_dir { names.dirs.push(name.to_string()) } else { names.files.push(name.to_string()) }
    }
}

/// The contents of each `<name>…</name>` element of `xml`, in order.
fn tags<'a>(xml: &'a str, name: &str) -> impl Iterator<Item = String> + 'a {
    let (open, close) = (format!("<{name}>"), format!("</{name}>"));
    let mut rest = xml;
    std::iter::from_fn(move || {
        let start = rest.find(&open)? + open.len();
        let end = start + rest[start..].find(&close)?;
        let found = rest[start..end].to_string();
        rest = &rest[end + close.len()..];
        Some(found)
    })
}

/// Percent-encode all but unreserved characters (a query value).
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A key as `encoding-type=url` gives it: percent-decoded (with `+` for a space), and the XML
/// escapes undone.
fn decode(s: &str) -> String {
    let s = s.replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&apos;", "'");
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                match std::str::from_utf8(&bytes[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listing_documents_are_read_and_keys_decoded() {
        let xml = "<ListBucketResult><IsTruncated>true</IsTruncated><Contents><Key>s/a%2Bb+c</Key></Contents>\
                   <CommonPrefixes><Prefix>s/grp%2F</Prefix></CommonPrefixes><NextContinuationToken>t1</NextContinuationToken></ListBucketResult>";
        assert_eq!(tags(xml, "Key").map(|k| decode(&k)).collect::<Vec<_>>(), ["s/a+b c"]);
        let prefixes: Vec<String> =
            tags(xml, "CommonPrefixes").flat_map(|p| tags(&p, "Prefix").map(|x| decode(&x)).collect::<Vec<_>>()).collect();
        assert_eq!(prefixes, ["s/grp/"]);
        assert_eq!(tags(xml, "NextContinuationToken").next().as_deref(), Some("t1"));
        assert_eq!(encode("a b/c"), "a%20b%2Fc");
        assert_eq!(decode("100%"), "100%");
    }
}

//! The clients of the four kinds of object storage — S3 (and S3-compatible servers), GCS, Azure
//! and plain HTTP(S) — built from the command line's options and each cloud's conventional
//! environment; a mount that could not work (a plain-HTTP endpoint not allowed, an endpoint of
//! its own without credentials) is refused here, before anything is asked.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use object_store::path::Path as ObjectPath;
use object_store::{ClientOptions, ObjectStore as Remote, RetryConfig};

use super::metered::MeteredConnector;
use super::raw::{RawRequests, Signer};
use super::{DOCUMENTS_IN_FLIGHT, Listing};
use crate::store::{RemoteLocation, RemoteOptions};
use crate::{Error, Result};

/// The client of `location`, how its directories are listed, and (S3, GCS, Azure) the raw
/// requests: conditional deletes, and S3's listing that survives keys object_store cannot parse.
/// Nothing is requested yet.
pub(super) fn connect(location: &RemoteLocation, options: &RemoteOptions) -> Result<(Arc<dyn Remote>, Listing, Option<RawRequests>)> {
    let client = ClientOptions::new()
        .with_timeout(Duration::from_secs(30))
        .with_connect_timeout(Duration::from_secs(5))
        .with_pool_max_idle_per_host(DOCUMENTS_IN_FLIGHT);
    let retry = RetryConfig { max_retries: 6, retry_timeout: Duration::from_secs(60), ..RetryConfig::default() };
    let invalid = |e: object_store::Error| Error::Invalid(format!("{location}: {e}"));
    let (remote, listing, raw): (Arc<dyn Remote>, _, _) = match location {
        RemoteLocation::S3 { bucket, prefix } => {
            let mut b = object_store::aws::AmazonS3Builder::new()
                .with_client_options(client.clone())
                .with_http_connector(MeteredConnector)
                .with_retry(retry);
            for (key, value) in env_config("AWS_") {
                b = b.with_config(key, value);
            }
            b = b.with_bucket_name(bucket).with_conditional_put(object_store::aws::S3ConditionalPut::ETagMatch);
            if let Some(e) = &options.endpoint {
                b = b.with_endpoint(e);
            }
            if let Some(r) = options.region.clone().or_else(region_from_env) {
                b = b.with_region(r);
            }
            if options.no_sign_request {
                b = b.with_skip_signature(true);
            }
            if options.virtual_hosted {
                b = b.with_virtual_hosted_style_request(true);
            }
            if std::env::var_os("AWS_ACCESS_KEY_ID").is_none()
                && let Some(c) = profile_credentials()
            {
                b = b.with_access_key_id(c.0).with_secret_access_key(c.1);
                if let Some(token) = c.2 {
                    b = b.with_token(token);
                }
            }
            use object_store::aws::AmazonS3ConfigKey as Key;
            let region = b.get_config_value(&Key::Region).unwrap_or_else(|| "us-east-1".into());
            let virtual_hosted = b.get_config_value(&Key::VirtualHostedStyleRequest).is_some_and(|v| v == "true");
            let sign = b.get_config_value(&Key::SkipSignature).is_none_or(|v| v != "true");
            let base = match (b.get_config_value(&Key::Endpoint), virtual_hosted) {
                (Some(e), true) => e.trim_end_matches('/').to_string(),
                (Some(e), false) => format!("{}/{bucket}", e.trim_end_matches('/')),
                (None, true) => format!("https://{bucket}.s3.{region}.amazonaws.com"),
                (None, false) => format!("https://s3.{region}.amazonaws.com/{bucket}"),
            };
            let endpoint = b.get_config_value(&Key::Endpoint);
            if let Some(e) = endpoint.as_deref().filter(|e| e.starts_with("http://"))
                && b.get_config_value(&Key::Client(object_store::ClientConfigKey::AllowHttp)).is_none_or(|v| v != "true")
            {
                return Err(Error::Invalid(format!(
                    "{location}: the endpoint {e} is plain HTTP, which sends every request unencrypted: set AWS_ALLOW_HTTP=true to use it"
                )));
            }
            // Elsewhere than AWS there is no instance metadata to ask: saying so now beats a
            // wait on the metadata address and a vaguer error after it.
            // An AWS endpoint of its own (a VPC endpoint) still has the instance's metadata.
            if let Some(e) = endpoint
                .filter(|e| sign && !is_aws_endpoint(e) && b.get_config_value(&Key::AccessKeyId).is_none() && !credential_source_set())
            {
                return Err(Error::Invalid(format!(
                    "{location}: no credentials for the endpoint {e}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE, from ~/.aws/credentials), or mount a public bucket with --no-sign-request"
                )));
            }
            let s3 = Arc::new(b.build().map_err(invalid)?);
            let raw_client = client.with_allow_http(base.starts_with("http://"));
            let raw = RawRequests::new(Signer::S3 { s3: s3.clone(), region }, &raw_client, base, prefix.clone(), sign).map_err(invalid)?;
            (prefixed(s3, prefix)?, Listing::Bucket, Some(raw))
        }
        RemoteLocation::Gcs { bucket, prefix } => {
            let mut b = object_store::gcp::GoogleCloudStorageBuilder::new()
                .with_client_options(client.clone())
                .with_http_connector(MeteredConnector)
                .with_retry(retry);
            // GOOGLE_APPLICATION_CREDENTIALS, GOOGLE_SERVICE_ACCOUNT, ...
            for (key, value) in env_config("GOOGLE_") {
                b = b.with_config(key, value);
            }
            b = b.with_bucket_name(bucket);
            if let Some(e) = &options.endpoint {
                b = b.with_base_url(e);
            }
            if options.no_sign_request {
                b = b.with_skip_signature(true);
            }
            use object_store::gcp::GoogleConfigKey as Key;
            let base = b.get_config_value(&Key::BaseUrl).unwrap_or_else(|| "https://storage.googleapis.com".into());
            let base = format!("{}/{bucket}", base.trim_end_matches('/'));
            let sign = b.get_config_value(&Key::SkipSignature).is_none_or(|v| v != "true");
            let gcs = Arc::new(b.build().map_err(invalid)?);
            let raw_client = client.with_allow_http(base.starts_with("http://"));
            let raw = RawRequests::new(Signer::Gcs { gcs: gcs.clone() }, &raw_client, base, prefix.clone(), sign).map_err(invalid)?;
            (prefixed(gcs, prefix)?, Listing::Bucket, Some(raw))
        }
        RemoteLocation::Azure { container, account, prefix } => {
            let mut b = object_store::azure::MicrosoftAzureBuilder::new()
                .with_client_options(client.clone())
                .with_http_connector(MeteredConnector)
                .with_retry(retry);
            // AZURE_STORAGE_ACCOUNT_NAME, AZURE_STORAGE_ACCOUNT_KEY, AZURE_STORAGE_USE_EMULATOR
            // (Azurite), ...
            for (key, value) in env_config("AZURE_") {
                b = b.with_config(key, value);
            }
            b = b.with_container_name(container);
            if let Some(a) = account {
                b = b.with_account(a);
            }
            if let Some(e) = &options.endpoint {
                b = b.with_endpoint(e.clone()).with_allow_http(e.starts_with("http://"));
            }
            if options.no_sign_request {
                b = b.with_skip_signature(true);
            }
            // The container's URL as the builder makes it (Azurite's: the account after the host).
            use object_store::azure::AzureConfigKey as Key;
            let value = |key: Key| b.get_config_value(&key).filter(|v| !v.is_empty());
            let emulator = value(Key::UseEmulator).is_some_and(|v| v == "true");
            let account_name = value(Key::AccountName).or_else(|| emulator.then(|| "devstoreaccount1".into())).unwrap_or_default();
            let service = if emulator {
                let url = std::env::var("AZURITE_BLOB_STORAGE_URL").unwrap_or_else(|_| "http://127.0.0.1:10000".into());
                format!("{}/{account_name}", url.trim_end_matches('/'))
            } else {
                value(Key::Endpoint)
                    .unwrap_or_else(|| format!("https://{account_name}.blob.core.windows.net"))
                    .trim_end_matches('/')
                    .to_string()
            };
            let base = format!("{service}/{container}");
            let sign = value(Key::SkipSignature).is_none_or(|v| v != "true");
            let azure = Arc::new(b.build().map_err(invalid)?);
            let raw_client = client.with_allow_http(base.starts_with("http://"));
            let signer = Signer::Azure { azure: azure.clone(), account: account_name };
            let raw = RawRequests::new(signer, &raw_client, base, prefix.clone(), sign).map_err(invalid)?;
            (prefixed(azure, prefix)?, Listing::Bucket, Some(raw))
        }
        RemoteLocation::Http { url } => {
            let allow_http = url.starts_with("http://");
            let http = object_store::http::HttpBuilder::new()
                .with_url(url)
                .with_http_connector(MeteredConnector)
                .with_client_options(client.with_allow_http(allow_http))
                .with_retry(retry)
                .build()
                .map_err(invalid)?;
            (Arc::new(http) as Arc<dyn Remote>, Listing::Unavailable, None)
        }
    };
    Ok((remote, listing, raw))
}

/// A cloud's conventional environment (`AWS_*`, `GOOGLE_*`, `AZURE_*`), as its builder's
/// `from_env` reads it: applied over the client options set here, of which the environment may
/// set some too (`AWS_ALLOW_HTTP`, `GOOGLE_ALLOW_HTTP`).
pub(super) fn env_config<K: std::str::FromStr>(prefix: &str) -> Vec<(K, String)> {
    std::env::vars()
        .filter(|(key, _)| key.starts_with(prefix))
        .filter_map(|(key, value)| Some((key.to_ascii_lowercase().parse().ok()?, value)))
        .collect()
}

/// The keys of `remote` under `prefix`, as keys relative to it.
pub(super) fn prefixed<R: Remote>(remote: Arc<R>, prefix: &str) -> Result<Arc<dyn Remote>> {
    if prefix.is_empty() {
        return Ok(remote);
    }
    let prefix = ObjectPath::parse(prefix).map_err(|e| Error::Invalid(e.to_string()))?;
    Ok(Arc::new(object_store::prefix::PrefixStore::new(remote, prefix)))
}

pub(super) fn region_from_env() -> Option<String> {
    std::env::var("AWS_REGION").ok().or_else(|| std::env::var("AWS_DEFAULT_REGION").ok()).filter(|r| !r.is_empty())
}

/// Whether `endpoint` is one of AWS's own (`*.amazonaws.com`, `*.amazonaws.com.cn`): a VPC
/// or FIPS endpoint, where EC2's instance metadata answers as it does for the default one.
pub(super) fn is_aws_endpoint(endpoint: &str) -> bool {
    let host = endpoint.split_once("://").map_or(endpoint, |(_, rest)| rest);
    let host = host.split(['/', '?']).next().unwrap_or(host);
    let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
    let host = host.split(':').next().unwrap_or(host).trim_end_matches('.').to_ascii_lowercase();
    ["amazonaws.com", "amazonaws.com.cn"].iter().any(|aws| host == *aws || host.ends_with(&format!(".{aws}")))
}

/// Whether the environment names a source of credentials other than keys: web identity, a
/// container's credential service, or an instance metadata address of its own.
pub(super) fn credential_source_set() -> bool {
    ["AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_METADATA_ENDPOINT"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|v| !v.is_empty()))
}

/// The access key, secret and session token of `AWS_PROFILE` (default `default`) in the shared
/// credentials file (`AWS_SHARED_CREDENTIALS_FILE`, default `~/.aws/credentials`).
pub(super) fn profile_credentials() -> Option<(String, String, Option<String>)> {
    let file = std::env::var_os("AWS_SHARED_CREDENTIALS_FILE")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".aws/credentials")))?;
    let profile = std::env::var("AWS_PROFILE").unwrap_or_else(|_| "default".into());
    parse_credentials(&std::fs::read_to_string(file).ok()?, &profile)
}

pub(super) fn parse_credentials(text: &str, profile: &str) -> Option<(String, String, Option<String>)> {
    let (mut section, mut fields) = (String::new(), HashMap::new());
    for line in text.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.trim().to_string();
        } else if section == profile
            && let Some((k, v)) = line.split_once('=')
        {
            fields.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    Some((fields.remove("aws_access_key_id")?, fields.remove("aws_secret_access_key")?, fields.remove("aws_session_token")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aws_endpoints_are_told_from_others_by_their_host() {
        for aws in [
            "https://s3.eu-west-1.amazonaws.com",
            "https://bucket.vpce-1a2b.s3.us-east-1.vpce.amazonaws.com/",
            "https://s3.cn-north-1.amazonaws.com.cn:443",
        ] {
            assert!(is_aws_endpoint(aws), "{aws}");
        }
        for other in ["http://127.0.0.1:9000", "https://minio.example.org", "https://amazonaws.com.evil.org", "https://x@notamazonaws.com/"]
        {
            assert!(!is_aws_endpoint(other), "{other}");
        }
    }

    #[test]
    fn profile_credentials_are_read_from_their_section() {
        let text = "[default]\naws_access_key_id = A\naws_secret_access_key=B\n\n[other]\naws_access_key_id=C\naws_secret_access_key = D\naws_session_token = T\n";
        assert_eq!(parse_credentials(text, "default"), Some(("A".into(), "B".into(), None)));
        assert_eq!(parse_credentials(text, "other"), Some(("C".into(), "D".into(), Some("T".into()))));
        assert_eq!(parse_credentials(text, "missing"), None);
    }
}

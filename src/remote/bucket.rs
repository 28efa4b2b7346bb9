//! The bucket that holds the bytes behind pointer files (files of 8 MiB
//! or more, `crate::export::pointer`): an S3-compatible object store,
//! reached through the `object_store` crate. Objects are keyed by content
//! (`<prefix>/blake3/<first 2 hex digits>/<64 hex digits>`) and written
//! create-only (`If-None-Match: *`): an upload never overwrites.

use std::sync::Arc;

use object_store::aws::{AmazonS3Builder, S3ConditionalPut};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, PutMode, PutOptions, PutPayload};

/// Where the bucket is and the credentials to reach it, as the caller
/// found them (the CLI: `[push] bucket` and the standard AWS variables
/// and profiles; the library reads no environment).
#[derive(Debug, Clone, Default)]
pub struct BucketConfig {
    /// `s3://BUCKET[/PREFIX]`.
    pub url: String,
    /// The endpoint of an S3-compatible service (`http://127.0.0.1:9000`);
    /// `None`: AWS.
    pub endpoint: Option<String>,
    /// The region (`us-east-1` when unset).
    pub region: Option<String>,
    /// Access key id.
    pub access_key_id: Option<String>,
    /// Secret access key.
    pub secret_access_key: Option<String>,
    /// Session token.
    pub session_token: Option<String>,
}

/// Why `url` cannot name a bucket, if it cannot: it must be
/// `s3://BUCKET[/PREFIX]` with a bucket name. Checked where the URL is
/// read (at mount and at `opfs push`, as [`super::url_problem`] is), not
/// only when the first big file goes up.
pub fn url_problem(url: &str) -> Option<String> {
    match url.strip_prefix("s3://") {
        Some(rest) if !rest.split('/').next().unwrap_or("").is_empty() => None,
        _ => Some(format!(
            "bucket {url:?} is not an s3://BUCKET[/PREFIX] URL (e.g. s3://team-checkpoints/opfs)"
        )),
    }
}

/// Why `endpoint` (`[push] bucket_endpoint`, `AWS_ENDPOINT_URL`) cannot
/// be used, if it cannot: it holds a user name or password (before `@`)
/// or a query string or fragment (after `?` or `#`). opfs would print it
/// in its errors, `push.json` and `opfs status`, and the configuration is
/// readable inside `opfs run`; the bucket's credentials come from the
/// AWS variables or a profile. The message never repeats the secret.
pub fn endpoint_problem(endpoint: &str) -> Option<String> {
    let rest = endpoint.split_once("://").map_or(endpoint, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let what = if authority.contains('@') {
        "a user name or password (before '@')"
    } else if rest.contains(['?', '#']) {
        "a query string or fragment (after '?' or '#')"
    } else {
        return None;
    };
    let shown = match (authority.rsplit_once('@'), endpoint.split_once("://")) {
        (Some((_, host)), Some((scheme, _))) => format!("{scheme}://***@{host}"),
        (Some((_, host)), None) => format!("***@{host}"),
        (None, _) => endpoint
            .split(['?', '#'])
            .next()
            .unwrap_or_default()
            .to_string(),
    };
    Some(format!(
        "the bucket endpoint {shown}... holds {what}: opfs refuses a credential there, since it \
         would print it in its errors, push.json and `opfs status`, and the configuration is \
         readable inside `opfs run`; give the endpoint as scheme://host[:port] and the \
         credentials in AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or a profile in \
         ~/.aws/credentials (AWS_PROFILE)"
    ))
}

/// Why the bucket could not be used. Each names the bucket.
#[derive(Debug, thiserror::Error)]
pub enum BucketError {
    /// The URL is not `s3://BUCKET[/PREFIX]`.
    #[error(
        "bucket {url:?} is not an s3://BUCKET[/PREFIX] URL; fix [push] bucket in the configuration"
    )]
    BadUrl {
        /// The URL as configured.
        url: String,
    },
    /// The object store refused or could not be reached.
    #[error(
        "bucket {url}: {what}: {source}; check the endpoint, the network and the AWS credentials (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or a profile in ~/.aws/credentials) and that they may write the bucket"
    )]
    Store {
        /// The bucket.
        url: String,
        /// The step.
        what: String,
        /// The cause.
        #[source]
        source: object_store::Error,
    },
    /// An object's bytes are not those its key names.
    #[error("bucket {url}: object {key} does not hold the bytes its name says (BLAKE3 differs); delete it, then `opfs push --objects` uploads it again")]
    Corrupt {
        /// The bucket.
        url: String,
        /// The object's key.
        key: String,
    },
    /// No async runtime could be started.
    #[error("cannot start the I/O runtime for bucket {url}: {source}")]
    Runtime {
        /// The bucket.
        url: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// An open bucket.
pub struct Bucket {
    url: String,
    prefix: String,
    store: Arc<dyn ObjectStore>,
    rt: tokio::runtime::Runtime,
}

impl std::fmt::Debug for Bucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bucket").field("url", &self.url).finish()
    }
}

/// Whether an upload wrote the object or found it there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upload {
    /// Written now.
    Created,
    /// Already there (content-keyed: the same bytes); nothing written.
    Existed,
}

impl Bucket {
    /// Opens the bucket `cfg` names (no request is made yet).
    ///
    /// Errors: [`BucketError::BadUrl`], [`BucketError::Store`] when the
    /// client cannot be built, [`BucketError::Runtime`].
    pub fn open(cfg: &BucketConfig) -> Result<Bucket, BucketError> {
        let rest = cfg
            .url
            .strip_prefix("s3://")
            .filter(|_| url_problem(&cfg.url).is_none())
            .ok_or_else(|| BucketError::BadUrl {
                url: cfg.url.clone(),
            })?;
        let (name, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let mut b = AmazonS3Builder::new()
            .with_bucket_name(name)
            .with_region(cfg.region.as_deref().unwrap_or("us-east-1"))
            .with_conditional_put(S3ConditionalPut::ETagMatch)
            // Bounded: an unreachable bucket fails the push (retried by the
            // pusher later) within seconds, not the crate's 3 minutes.
            .with_retry(object_store::RetryConfig {
                max_retries: 3,
                retry_timeout: std::time::Duration::from_secs(20),
                ..Default::default()
            });
        if let Some(e) = &cfg.endpoint {
            b = b.with_endpoint(e).with_allow_http(e.starts_with("http://"));
        }
        if let Some(k) = &cfg.access_key_id {
            b = b.with_access_key_id(k);
        }
        if let Some(s) = &cfg.secret_access_key {
            b = b.with_secret_access_key(s);
        }
        if let Some(t) = &cfg.session_token {
            b = b.with_token(t);
        }
        let store = b.build().map_err(|source| BucketError::Store {
            url: cfg.url.clone(),
            what: "configuring the client".into(),
            source,
        })?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|source| BucketError::Runtime {
                url: cfg.url.clone(),
                source,
            })?;
        Ok(Bucket {
            url: cfg.url.clone(),
            prefix: prefix.trim_matches('/').to_string(),
            store: Arc::new(store),
            rt,
        })
    }

    /// The bucket's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The key of the content whose BLAKE3 is `hash` (64 hex digits).
    pub fn key(&self, hash: &str) -> String {
        let k = format!("blake3/{}/{hash}", &hash[..2.min(hash.len())]);
        if self.prefix.is_empty() {
            k
        } else {
            format!("{}/{k}", self.prefix)
        }
    }

    /// Uploads `bytes` (whose BLAKE3 is `hash`) create-only: an object
    /// already under that key is left as it is ([`Upload::Existed`]).
    ///
    /// Errors: [`BucketError::Store`] (unreachable, refused, no such
    /// bucket).
    pub fn put(&self, hash: &str, bytes: Vec<u8>) -> Result<Upload, BucketError> {
        let key = ObjectPath::from(self.key(hash));
        let store = self.store.clone();
        let res = self.rt.block_on(async move {
            match store.head(&key).await {
                Ok(_) => return Ok(Upload::Existed),
                Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(("looking for an object", e)),
            }
            let opts = PutOptions {
                mode: PutMode::Create,
                ..Default::default()
            };
            match store.put_opts(&key, PutPayload::from(bytes), opts).await {
                Ok(_) => Ok(Upload::Created),
                Err(object_store::Error::AlreadyExists { .. }) => Ok(Upload::Existed),
                Err(e) => Err(("uploading an object", e)),
            }
        });
        res.map_err(|(what, source)| BucketError::Store {
            url: self.url.clone(),
            what: what.into(),
            source,
        })
    }

    /// The content whose BLAKE3 is `hash`, checked; `None` when the bucket
    /// has no such object.
    ///
    /// Errors: [`BucketError::Store`], [`BucketError::Corrupt`].
    pub fn get(&self, hash: &str) -> Result<Option<Vec<u8>>, BucketError> {
        let key_text = self.key(hash);
        let key = ObjectPath::from(key_text.clone());
        let store = self.store.clone();
        let res = self.rt.block_on(async move {
            match store.get(&key).await {
                Ok(r) => r.bytes().await.map(|b| Some(b.to_vec())),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        });
        let bytes = res.map_err(|source| BucketError::Store {
            url: self.url.clone(),
            what: format!("reading {key_text}"),
            source,
        })?;
        match bytes {
            Some(b) if blake3::hash(&b).to_hex().as_str() != hash => Err(BucketError::Corrupt {
                url: self.url.clone(),
                key: key_text,
            }),
            other => Ok(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_url_is_s3_with_a_bucket_name() {
        assert!(url_problem("s3://ckpt").is_none());
        assert!(url_problem("s3://ckpt/opfs/x").is_none());
        for bad in ["ckpt/opfs", "https://ckpt/opfs", "s3://", "s3:///opfs", ""] {
            let p = url_problem(bad).expect(bad);
            assert!(p.contains("s3://BUCKET[/PREFIX]"), "{p}");
        }
    }

    #[test]
    fn a_bucket_endpoint_holds_no_credential() {
        assert!(endpoint_problem("http://127.0.0.1:9000").is_none());
        assert!(endpoint_problem("https://s3.example.com/").is_none());
        for bad in [
            "http://AK:ENDPOINTSECRET@127.0.0.1:9000",
            "http://ENDPOINTSECRET@127.0.0.1:9000",
            "https://s3.example.com/?X-Amz-Security-Token=ENDPOINTSECRET",
        ] {
            let p = endpoint_problem(bad).expect(bad);
            assert!(!p.contains("ENDPOINTSECRET"), "{p}");
            assert!(p.contains("AWS_ACCESS_KEY_ID"), "{p}");
        }
    }
}

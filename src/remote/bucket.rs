//! The bucket that holds the bytes behind pointer files (files of 8 MiB
//! or more, `crate::export::pointer`): an S3-compatible object store,
//! reached through the `object_store` crate. Objects are keyed by content
//! (`<prefix>/blake3/<first 2 hex digits>/<64 hex digits>`) and written
//! create-only (`If-None-Match: *`): an upload never overwrites.

use std::io::{self, Read, Write};
use std::sync::Arc;

use object_store::aws::{AmazonS3Builder, S3ConditionalPut};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, PutMode, PutOptions, PutPayload, WriteMultipart};

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
    #[error("bucket {url}: object {key} does not hold the bytes its name says (another size or BLAKE3); delete it, then `opfs push --objects` uploads it again")]
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

    /// Uploads the `size` bytes read from `src`, whose BLAKE3 must be
    /// `hash`, create-only: an object already under that key is left as it
    /// is ([`Upload::Existed`], nothing is read). Memory stays bounded
    /// whatever the size: content below [`MULTIPART_MIN`] bytes is read
    /// and sent in one `PUT` with `If-None-Match: *`; larger content goes
    /// up as a multipart upload of [`PART_SIZE`] parts, at most
    /// [`PARTS_IN_FLIGHT`] at once, read as it is sent. Either way the
    /// BLAKE3 and the size are checked on the bytes as they are read, and
    /// nothing is written unless both match: a multipart upload is
    /// completed only then, and aborted on a mismatch or any error.
    ///
    /// Create-only for a multipart upload is a `HEAD` before it (the
    /// crate cannot make its completion conditional): two machines
    /// uploading the same content at once may both complete, the second
    /// replacing the object with the same bytes (the key is their BLAKE3,
    /// checked before completion), so no object ever changes content.
    ///
    /// Errors: [`PutError::Bucket`] (unreachable, refused, no such
    /// bucket), [`PutError::Mismatch`], [`PutError::Read`].
    pub fn put_from(&self, hash: &str, size: u64, src: &mut dyn Read) -> Result<Upload, PutError> {
        let key = ObjectPath::from(self.key(hash));
        let store = self.store.clone();
        let res = self
            .rt
            .block_on(upload(store.as_ref(), &key, hash, size, src, MULTIPART_MIN));
        res.map_err(|f| match f {
            Failure::Store(what, source) => PutError::Bucket(BucketError::Store {
                url: self.url.clone(),
                what: what.into(),
                source,
            }),
            Failure::Mismatch => PutError::Mismatch,
            Failure::Read(e) => PutError::Read(e),
        })
    }

    /// Writes to `out` the content whose BLAKE3 is `hash` and whose size
    /// is `size`, as it arrives (memory bounded whatever the object's
    /// size); `false` when the bucket has no such object (nothing
    /// written). Reading stops with [`BucketError::Corrupt`] as soon as
    /// more than `size` bytes arrive, or at the end when fewer did or the
    /// BLAKE3 differs: the caller then discards what `out` got.
    ///
    /// Errors: [`GetError::Bucket`] ([`BucketError::Store`],
    /// [`BucketError::Corrupt`]), [`GetError::Write`] (`out` failed).
    pub fn get_into(&self, hash: &str, size: u64, out: &mut dyn Write) -> Result<bool, GetError> {
        let key_text = self.key(hash);
        let key = ObjectPath::from(key_text.clone());
        let store = self.store.clone();
        let res = self
            .rt
            .block_on(download(store.as_ref(), &key, hash, size, out));
        res.map_err(|f| match f {
            Failure::Store(what, source) => GetError::Bucket(BucketError::Store {
                url: self.url.clone(),
                what: format!("{what} {key_text}"),
                source,
            }),
            Failure::Mismatch => GetError::Bucket(BucketError::Corrupt {
                url: self.url.clone(),
                key: key_text.clone(),
            }),
            Failure::Read(e) => GetError::Write(e),
        })
    }
}

/// Objects of at least this many bytes are uploaded in parts.
pub const MULTIPART_MIN: u64 = 16 << 20;
/// The size of each part of a multipart upload (the last may be smaller).
pub const PART_SIZE: usize = 8 << 20;
/// S3's most parts in one multipart upload.
const MAX_PARTS: u64 = 10_000;

/// The part size for content of `size` bytes: [`PART_SIZE`], larger for
/// content above 78 GiB so that it fits in [`MAX_PARTS`] parts.
fn part_size(size: u64) -> usize {
    (PART_SIZE as u64).max(size.div_ceil(MAX_PARTS)) as usize
}

/// Parts of one multipart upload sent at once.
pub const PARTS_IN_FLIGHT: usize = 2;
/// The reads from a source or into a file, bytes.
const READ_SIZE: usize = 1 << 20;

/// Why [`Bucket::put_from`] wrote nothing.
#[derive(Debug)]
pub enum PutError {
    /// The bucket refused or could not be reached.
    Bucket(BucketError),
    /// The bytes read are not the content named (another size or BLAKE3).
    Mismatch,
    /// The source could not be read.
    Read(io::Error),
}

/// Why [`Bucket::get_into`] failed.
#[derive(Debug)]
pub enum GetError {
    /// The bucket failed, or its object is not the content named.
    Bucket(BucketError),
    /// The output could not be written.
    Write(io::Error),
}

/// A transfer's failure, before it is named.
#[derive(Debug)]
enum Failure {
    Store(&'static str, object_store::Error),
    Mismatch,
    Read(io::Error),
}

/// Reads `buf.len()` bytes or up to the end of `src`; the count.
fn read_full(src: &mut dyn Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match src.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// [`Bucket::put_from`] on `store`, multipart from `multipart_min` bytes.
async fn upload(
    store: &dyn ObjectStore,
    key: &ObjectPath,
    hash: &str,
    size: u64,
    src: &mut dyn Read,
    multipart_min: u64,
) -> Result<Upload, Failure> {
    match store.head(key).await {
        Ok(_) => return Ok(Upload::Existed),
        Err(object_store::Error::NotFound { .. }) => {}
        Err(e) => return Err(Failure::Store("looking for an object", e)),
    }
    if size < multipart_min {
        let mut bytes = Vec::with_capacity(size as usize);
        src.take(size + 1)
            .read_to_end(&mut bytes)
            .map_err(Failure::Read)?;
        if bytes.len() as u64 != size || blake3::hash(&bytes).to_hex().as_str() != hash {
            return Err(Failure::Mismatch);
        }
        let opts = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        return match store.put_opts(key, PutPayload::from(bytes), opts).await {
            Ok(_) => Ok(Upload::Created),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(Upload::Existed),
            Err(e) => Err(Failure::Store("uploading an object", e)),
        };
    }
    let parts = store
        .put_multipart(key)
        .await
        .map_err(|e| Failure::Store("starting a multipart upload", e))?;
    let mut w = WriteMultipart::new_with_chunk_size(parts, part_size(size));
    match feed(&mut w, hash, size, src).await {
        Ok(()) => match w.finish().await {
            Ok(_) => Ok(Upload::Created),
            Err(e) => Err(Failure::Store("completing a multipart upload", e)),
        },
        Err(f) => {
            // Its parts are dropped by the store; a failed abort leaves
            // only parts no object refers to (a lifecycle rule on
            // incomplete uploads removes them).
            let _ = w.abort().await;
            Err(f)
        }
    }
}

/// Reads `src` into `w`, checking its size and BLAKE3 as it goes; `Ok`
/// when all of it was handed to `w` and both match (nothing completed).
async fn feed(
    w: &mut WriteMultipart,
    hash: &str,
    size: u64,
    src: &mut dyn Read,
) -> Result<(), Failure> {
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; READ_SIZE];
    let mut total = 0u64;
    loop {
        let n = read_full(src, &mut buf).map_err(Failure::Read)?;
        if n == 0 {
            break;
        }
        total += n as u64;
        if total > size {
            return Err(Failure::Mismatch);
        }
        hasher.update(&buf[..n]);
        w.wait_for_capacity(PARTS_IN_FLIGHT)
            .await
            .map_err(|e| Failure::Store("uploading a part", e))?;
        w.write(&buf[..n]);
    }
    if total != size || hasher.finalize().to_hex().as_str() != hash {
        return Err(Failure::Mismatch);
    }
    Ok(())
}

/// [`Bucket::get_into`] on `store`; `false` when there is no object.
async fn download(
    store: &dyn ObjectStore,
    key: &ObjectPath,
    hash: &str,
    size: u64,
    out: &mut dyn Write,
) -> Result<bool, Failure> {
    use futures::StreamExt;
    let got = match store.get(key).await {
        Ok(r) => r,
        Err(object_store::Error::NotFound { .. }) => return Ok(false),
        Err(e) => return Err(Failure::Store("reading", e)),
    };
    if got.meta.size > size {
        return Err(Failure::Mismatch);
    }
    let mut stream = got.into_stream();
    let mut hasher = blake3::Hasher::new();
    let mut total = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| Failure::Store("reading", e))?;
        total += chunk.len() as u64;
        if total > size {
            return Err(Failure::Mismatch);
        }
        hasher.update(&chunk);
        out.write_all(&chunk).map_err(Failure::Read)?;
    }
    if total != size || hasher.finalize().to_hex().as_str() != hash {
        return Err(Failure::Mismatch);
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `upload` of `bytes` named `hash`/`size` on an in-memory store,
    /// multipart from 1 byte; the outcome and what the store then holds.
    fn upload_to_memory(bytes: &[u8], hash: &str, size: u64) -> (Result<Upload, Failure>, bool) {
        let store = object_store::memory::InMemory::new();
        let key = ObjectPath::from("k");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let r = rt.block_on(upload(&store, &key, hash, size, &mut &bytes[..], 1));
        let there = rt.block_on(store.head(&key)).is_ok();
        (r, there)
    }

    #[test]
    fn a_multipart_upload_completes_only_when_size_and_hash_match() {
        let bytes: Vec<u8> = (0..(PART_SIZE * 2 + 5)).map(|i| (i % 251) as u8).collect();
        let hash = blake3::hash(&bytes).to_hex().to_string();
        let n = bytes.len() as u64;
        let (r, there) = upload_to_memory(&bytes, &hash, n);
        assert!(matches!(r, Ok(Upload::Created)) && there, "{r:?}");
        // Other bytes, more bytes, fewer bytes: aborted, nothing written.
        let other = blake3::hash(b"x").to_hex().to_string();
        for (hash, size) in [(&other, n), (&hash, n - 1), (&hash, n + 1)] {
            let (r, there) = upload_to_memory(&bytes, hash, size);
            assert!(matches!(r, Err(Failure::Mismatch)) && !there, "{r:?}");
        }
    }

    #[test]
    fn parts_are_8_mib_and_never_more_than_s3_takes() {
        assert_eq!(part_size(1 << 30), PART_SIZE);
        let huge = 200u64 << 30;
        assert!(huge.div_ceil(part_size(huge) as u64) <= MAX_PARTS);
    }

    #[test]
    fn a_download_stops_at_more_bytes_than_named() {
        let store = object_store::memory::InMemory::new();
        let key = ObjectPath::from("k");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let bytes = vec![7u8; 3 << 20];
        rt.block_on(store.put(&key, PutPayload::from(bytes.clone())))
            .expect("put");
        let hash = blake3::hash(&bytes).to_hex().to_string();
        let mut out = Vec::new();
        let r = rt.block_on(download(&store, &key, &hash, 1 << 20, &mut out));
        assert!(matches!(r, Err(Failure::Mismatch)), "{r:?}");
        assert!(out.len() <= 1 << 20, "read past the size: {}", out.len());
        let mut out = Vec::new();
        let r = rt.block_on(download(&store, &key, &hash, 3 << 20, &mut out));
        assert!(matches!(r, Ok(true)) && out == bytes, "{r:?}");
    }

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

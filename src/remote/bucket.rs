//! The bucket that holds the bytes behind pointer files (files of 8 MiB
//! or more, `crate::export::pointer`): an S3-compatible object store,
//! reached through the `object_store` crate. Objects are keyed by content
//! (`<prefix>/blake3/<first 2 hex digits>/<64 hex digits>`) and written
//! create-only (`If-None-Match: *`): an upload never overwrites.

use std::io::{self, Read, Write};
use std::sync::Arc;

use object_store::aws::{AmazonS3Builder, S3ConditionalPut};
use object_store::path::Path as ObjectPath;
use object_store::{
    ClientOptions, GetOptions, GetRange, MultipartUpload, ObjectStore, PutMode, PutOptions,
    PutPayload,
};

use super::Cancel;

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
    /// The most one request to the bucket may take, from its start to the
    /// end of its body (`[push] timeout_seconds`, as for git); `None`:
    /// [`super::git::DEFAULT_DEADLINE`]. Each request moves at most
    /// [`PART_SIZE`] bytes of a big object (an upload's part, a download's
    /// range), so this bounds the slowest link that works, not the
    /// biggest object.
    pub timeout: Option<std::time::Duration>,
}

/// How long connecting to the bucket may take, whatever the request
/// timeout: an unreachable bucket fails within this.
pub const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

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
        "bucket {url}: {what}: {source}; check the endpoint, the network (a request that timed out may need a larger [push] timeout_seconds) and the AWS credentials (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or a profile in ~/.aws/credentials) and that they may write the bucket"
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
    /// The object under the key the content's BLAKE3 names exists with
    /// another size: objects are written create-only, so it cannot be
    /// replaced, and a pointer to it would name bytes the bucket does not
    /// hold.
    #[error("bucket {url}: object {key} holds {found} bytes where its content has {size}: the bucket is corrupt; delete that object, then `opfs push --objects` uploads it again")]
    WrongSize {
        /// The bucket.
        url: String,
        /// The object's key.
        key: String,
        /// The size the bucket reports.
        found: u64,
        /// The content's size.
        size: u64,
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
    /// Stops an upload under way ([`Bucket::with_cancel`]).
    cancel: Cancel,
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
            // Each request (a part, a range, a small object) may take the
            // configured timeout, not the crate's 30 s: an 8 MiB part over a
            // 2 Mbit/s uplink needs about 34 s.
            .with_client_options(
                ClientOptions::new()
                    .with_timeout(cfg.timeout.unwrap_or(super::git::DEFAULT_DEADLINE))
                    .with_connect_timeout(CONNECT_TIMEOUT),
            )
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
            cancel: Cancel::default(),
        })
    }

    /// This bucket, its uploads stopped by `cancel` (the daemon's, at
    /// unmount): an upload under way ends as [`PutError::Interrupted`]
    /// within 50 ms of the cancel, a single `PUT` dropped mid-request, a
    /// multipart upload between or during its parts, then aborted (so no
    /// incomplete upload is left; the abort request waits at most
    /// [`ABORT_WAIT`]).
    pub fn with_cancel(mut self, cancel: Cancel) -> Bucket {
        self.cancel = cancel;
        self
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
        let key_text = self.key(hash);
        let key = ObjectPath::from(key_text.clone());
        let store = self.store.clone();
        let res = self.rt.block_on(upload(
            store.as_ref(),
            &key,
            hash,
            size,
            src,
            MULTIPART_MIN,
            &self.cancel,
        ));
        res.map_err(|f| match f {
            Failure::Store(what, source) => PutError::Bucket(BucketError::Store {
                url: self.url.clone(),
                what: what.into(),
                source,
            }),
            Failure::WrongSize(found) => PutError::Bucket(BucketError::WrongSize {
                url: self.url.clone(),
                key: key_text.clone(),
                found,
                size,
            }),
            Failure::Mismatch => PutError::Mismatch,
            Failure::Read(e) => PutError::Read(e),
            Failure::Cancelled => PutError::Interrupted,
        })
    }

    /// True when the bucket holds an object of `size` bytes under the key
    /// of `hash` (one `HEAD`; nothing is read): false when it holds none,
    /// or one of another size (a corrupt bucket, which a checkout reports).
    ///
    /// Errors: [`BucketError::Store`] (unreachable, refused).
    pub fn holds(&self, hash: &str, size: u64) -> Result<bool, BucketError> {
        let key_text = self.key(hash);
        let key = ObjectPath::from(key_text.clone());
        match self.rt.block_on(self.store.head(&key)) {
            Ok(meta) => Ok(meta.size == size),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(source) => Err(BucketError::Store {
                url: self.url.clone(),
                what: format!("looking for {key_text}"),
                source,
            }),
        }
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
        let res = self.rt.block_on(download(
            store.as_ref(),
            &key,
            hash,
            size,
            out,
            PART_SIZE as u64,
        ));
        res.map_err(|f| match f {
            Failure::Store(what, source) => GetError::Bucket(BucketError::Store {
                url: self.url.clone(),
                what: format!("{what} {key_text}"),
                source,
            }),
            Failure::Mismatch | Failure::WrongSize(_) => GetError::Bucket(BucketError::Corrupt {
                url: self.url.clone(),
                key: key_text.clone(),
            }),
            Failure::Read(e) => GetError::Write(e),
            Failure::Cancelled => GetError::Write(io::Error::from(io::ErrorKind::Interrupted)),
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
    /// Stopped by the bucket's cancel ([`Bucket::with_cancel`]): nothing
    /// was written (a multipart upload was aborted).
    Interrupted,
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
    /// The object under the key exists with this other size.
    WrongSize(u64),
    Read(io::Error),
    /// The cancel was called.
    Cancelled,
}

/// The most an upload stopped by its cancel waits for the abort of its
/// multipart upload (one request).
pub const ABORT_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Returns once `cancel` is called (checked every 50 ms).
async fn cancelled(cancel: &Cancel) {
    while !cancel.is_cancelled() {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// `fut`'s output, or [`Failure::Cancelled`] (`fut` dropped: its request
/// cut short) as soon as `cancel` is called.
async fn or_cancel<T>(
    fut: impl std::future::Future<Output = T>,
    cancel: &Cancel,
) -> Result<T, Failure> {
    // Once cancelled, no request starts.
    if cancel.is_cancelled() {
        return Err(Failure::Cancelled);
    }
    let fut = std::pin::pin!(fut);
    let stop = std::pin::pin!(cancelled(cancel));
    match futures::future::select(fut, stop).await {
        futures::future::Either::Left((v, _)) => Ok(v),
        futures::future::Either::Right(((), _)) => Err(Failure::Cancelled),
    }
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

/// [`Bucket::put_from`] on `store`, multipart from `multipart_min` bytes;
/// every request stops at `cancel` ([`Bucket::with_cancel`]).
async fn upload(
    store: &dyn ObjectStore,
    key: &ObjectPath,
    hash: &str,
    size: u64,
    src: &mut dyn Read,
    multipart_min: u64,
    cancel: &Cancel,
) -> Result<Upload, Failure> {
    match or_cancel(store.head(key), cancel).await? {
        Ok(meta) if meta.size == size => return Ok(Upload::Existed),
        // Create-only: it cannot be replaced, and a pointer to it would
        // name bytes that are not there.
        Ok(meta) => return Err(Failure::WrongSize(meta.size)),
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
        // Cancelled: the request is dropped, nothing is created.
        return match or_cancel(store.put_opts(key, PutPayload::from(bytes), opts), cancel).await? {
            Ok(_) => Ok(Upload::Created),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(Upload::Existed),
            Err(e) => Err(Failure::Store("uploading an object", e)),
        };
    }
    let mut parts = or_cancel(store.put_multipart(key), cancel)
        .await?
        .map_err(|e| Failure::Store("starting a multipart upload", e))?;
    let sent = match send_parts(parts.as_mut(), hash, size, src, cancel).await {
        Ok(()) => or_cancel(parts.complete(), cancel)
            .await
            .map(|r| r.map_err(|e| Failure::Store("completing a multipart upload", e))),
        Err(f) => Err(f),
    };
    match sent {
        Ok(Ok(_)) => Ok(Upload::Created),
        Ok(Err(f)) | Err(f) => {
            // Its parts are dropped by the store; a failed abort leaves
            // only parts no object refers to (a lifecycle rule on
            // incomplete uploads removes them).
            let _ = tokio::time::timeout(ABORT_WAIT, parts.abort()).await;
            Err(f)
        }
    }
}

/// Reads `src` and sends it as the parts of `parts` ([`part_size`] each,
/// at most [`PARTS_IN_FLIGHT`] at once), checking its size and BLAKE3 as
/// it goes; `Ok` when all of it was sent and both match (nothing
/// completed). Stops at `cancel`: between parts, and during one (the
/// parts in flight dropped).
async fn send_parts(
    parts: &mut dyn MultipartUpload,
    hash: &str,
    size: u64,
    src: &mut dyn Read,
    cancel: &Cancel,
) -> Result<(), Failure> {
    use futures::StreamExt;
    let part = part_size(size);
    let mut in_flight: futures::stream::FuturesUnordered<object_store::UploadPart> =
        futures::stream::FuturesUnordered::new();
    let mut hasher = blake3::Hasher::new();
    let mut total = 0u64;
    let mut buf = vec![0u8; READ_SIZE];
    let mut next = Vec::with_capacity(part);
    loop {
        if cancel.is_cancelled() {
            return Err(Failure::Cancelled);
        }
        // Never past the part's end: a part's buffer is allocated once.
        let want = (part - next.len()).min(READ_SIZE);
        let n = read_full(src, &mut buf[..want]).map_err(Failure::Read)?;
        total += n as u64;
        if total > size {
            return Err(Failure::Mismatch);
        }
        hasher.update(&buf[..n]);
        next.extend_from_slice(&buf[..n]);
        let end = n == 0;
        if next.len() >= part || (end && !next.is_empty()) {
            while in_flight.len() >= PARTS_IN_FLIGHT {
                if let Some(r) = or_cancel(in_flight.next(), cancel).await? {
                    r.map_err(|e| Failure::Store("uploading a part", e))?;
                }
            }
            let full = std::mem::replace(&mut next, Vec::with_capacity(part));
            in_flight.push(parts.put_part(PutPayload::from(full)));
        }
        if end {
            break;
        }
    }
    if total != size || hasher.finalize().to_hex().as_str() != hash {
        return Err(Failure::Mismatch);
    }
    while let Some(r) = or_cancel(in_flight.next(), cancel).await? {
        r.map_err(|e| Failure::Store("uploading a part", e))?;
    }
    Ok(())
}

/// The byte ranges, at most `chunk` bytes each, that cover `size` bytes.
fn ranges(size: u64, chunk: u64) -> impl Iterator<Item = std::ops::Range<u64>> {
    (0..size.div_ceil(chunk)).map(move |i| i * chunk..((i + 1) * chunk).min(size))
}

/// [`Bucket::get_into`] on `store`, in requests of at most `chunk` bytes
/// each (a range each, so that no request's duration grows with the
/// object's size); `false` when there is no object.
async fn download(
    store: &dyn ObjectStore,
    key: &ObjectPath,
    hash: &str,
    size: u64,
    out: &mut dyn Write,
    chunk: u64,
) -> Result<bool, Failure> {
    use futures::StreamExt;
    let mut hasher = blake3::Hasher::new();
    let mut total = 0u64;
    // An empty object cannot be asked for a range: one plain request.
    let whole = std::iter::once(None).filter(|_| size == 0);
    for range in ranges(size, chunk).map(Some).chain(whole) {
        let first = range.as_ref().is_none_or(|r| r.start == 0);
        let want = range.as_ref().map_or(size, |r| r.end - r.start);
        let opts = GetOptions {
            range: range.map(GetRange::Bounded),
            ..Default::default()
        };
        let got = match store.get_opts(key, opts).await {
            Ok(r) => r,
            Err(object_store::Error::NotFound { .. }) if first => return Ok(false),
            Err(e) => return Err(Failure::Store("reading", e)),
        };
        // The whole object's size, from the first answer: another than
        // the pointer's is another content.
        if got.meta.size != size {
            return Err(Failure::Mismatch);
        }
        let mut stream = got.into_stream();
        let mut this = 0u64;
        while let Some(bytes) = stream.next().await {
            let bytes = bytes.map_err(|e| Failure::Store("reading", e))?;
            this += bytes.len() as u64;
            total += bytes.len() as u64;
            if total > size || this > want {
                return Err(Failure::Mismatch);
            }
            hasher.update(&bytes);
            out.write_all(&bytes).map_err(Failure::Read)?;
        }
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
        let r = rt.block_on(upload(
            &store,
            &key,
            hash,
            size,
            &mut &bytes[..],
            1,
            &Cancel::default(),
        ));
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
    fn a_cancelled_upload_writes_nothing() {
        let store = object_store::memory::InMemory::new();
        let key = ObjectPath::from("k");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let bytes = vec![5u8; 3000];
        let hash = blake3::hash(&bytes).to_hex().to_string();
        let cancel = Cancel::default();
        cancel.cancel();
        for multipart_min in [1, MULTIPART_MIN] {
            let r = rt.block_on(upload(
                &store,
                &key,
                &hash,
                3000,
                &mut &bytes[..],
                multipart_min,
                &cancel,
            ));
            assert!(matches!(r, Err(Failure::Cancelled)), "{r:?}");
            assert!(rt.block_on(store.head(&key)).is_err());
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
        let r = rt.block_on(download(&store, &key, &hash, 1 << 20, &mut out, 1 << 20));
        assert!(matches!(r, Err(Failure::Mismatch)), "{r:?}");
        assert!(out.len() <= 1 << 20, "read past the size: {}", out.len());
        let mut out = Vec::new();
        let r = rt.block_on(download(&store, &key, &hash, 3 << 20, &mut out, 1 << 20));
        assert!(matches!(r, Ok(true)) && out == bytes, "{r:?}");
    }

    #[test]
    fn a_download_asks_for_ranges_of_at_most_a_part() {
        let r: Vec<_> = ranges(10, 4).collect();
        assert_eq!(r, [0..4, 4..8, 8..10]);
        assert_eq!(ranges(8, 4).collect::<Vec<_>>(), [0..4, 4..8]);
        assert_eq!(ranges(0, 4).count(), 0);
        let size = (1u64 << 30) + 1;
        assert!(ranges(size, PART_SIZE as u64).all(|r| r.end - r.start <= PART_SIZE as u64));
        assert_eq!(ranges(size, PART_SIZE as u64).last(), Some(size - 1..size));

        // Every request the download makes names a range no larger than
        // the chunk, and the bytes arrive whole and in order.
        let store = Ranges::default();
        let key = ObjectPath::from("k");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let bytes: Vec<u8> = (0..(5 << 20) + 3).map(|i| (i % 253) as u8).collect();
        rt.block_on(store.0.put(&key, PutPayload::from(bytes.clone())))
            .expect("put");
        let hash = blake3::hash(&bytes).to_hex().to_string();
        let mut out = Vec::new();
        let n = bytes.len() as u64;
        let r = rt.block_on(download(&store, &key, &hash, n, &mut out, 2 << 20));
        assert!(matches!(r, Ok(true)) && out == bytes, "{r:?}");
        let asked = store.1.lock().expect("lock").clone();
        assert_eq!(
            asked,
            [
                Some(GetRange::Bounded(0..2 << 20)),
                Some(GetRange::Bounded(2 << 20..4 << 20)),
                Some(GetRange::Bounded(4 << 20..n)),
            ]
        );
        // No object: `false`, after one request.
        let mut out = Vec::new();
        let none = ObjectPath::from("none");
        let r = rt.block_on(download(&store, &none, &hash, n, &mut out, 2 << 20));
        assert!(matches!(r, Ok(false)) && out.is_empty(), "{r:?}");
    }

    #[test]
    fn an_object_of_another_size_under_the_key_is_a_corrupt_bucket() {
        let store = object_store::memory::InMemory::new();
        let key = ObjectPath::from("k");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let bytes = vec![9u8; 1000];
        let hash = blake3::hash(&bytes).to_hex().to_string();
        // What a bucket that answers any HEAD holds: something else.
        rt.block_on(store.put(&key, PutPayload::from(vec![0u8; 10])))
            .expect("put");
        for multipart_min in [1, MULTIPART_MIN] {
            let r = rt.block_on(upload(
                &store,
                &key,
                &hash,
                1000,
                &mut &bytes[..],
                multipart_min,
                &Cancel::default(),
            ));
            assert!(matches!(r, Err(Failure::WrongSize(10))), "{r:?}");
        }
        // Left as it was (create-only).
        let meta = rt.block_on(store.head(&key)).expect("head");
        assert_eq!(meta.size, 10);
        // The right size: found, nothing read.
        rt.block_on(store.put(&key, PutPayload::from(bytes.clone())))
            .expect("put");
        let r = rt.block_on(upload(
            &store,
            &key,
            &hash,
            1000,
            &mut &[][..],
            1,
            &Cancel::default(),
        ));
        assert!(matches!(r, Ok(Upload::Existed)), "{r:?}");
        let e = BucketError::WrongSize {
            url: "s3://b".into(),
            key: "blake3/ab/abcd".into(),
            found: 10,
            size: 1000,
        }
        .to_string();
        for part in ["blake3/ab/abcd", "10 bytes", "1000", "delete"] {
            assert!(e.contains(part), "{e}");
        }
    }

    /// An in-memory store that records the range of each `get`.
    #[derive(Debug, Default)]
    struct Ranges(
        object_store::memory::InMemory,
        std::sync::Mutex<Vec<Option<GetRange>>>,
    );

    impl std::fmt::Display for Ranges {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "Ranges")
        }
    }

    #[async_trait::async_trait]
    impl ObjectStore for Ranges {
        async fn put_opts(
            &self,
            location: &ObjectPath,
            payload: PutPayload,
            opts: PutOptions,
        ) -> object_store::Result<object_store::PutResult> {
            self.0.put_opts(location, payload, opts).await
        }
        async fn put_multipart_opts(
            &self,
            location: &ObjectPath,
            opts: object_store::PutMultipartOptions,
        ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
            self.0.put_multipart_opts(location, opts).await
        }
        async fn get_opts(
            &self,
            location: &ObjectPath,
            options: GetOptions,
        ) -> object_store::Result<object_store::GetResult> {
            self.1.lock().expect("lock").push(options.range.clone());
            self.0.get_opts(location, options).await
        }
        async fn delete(&self, location: &ObjectPath) -> object_store::Result<()> {
            self.0.delete(location).await
        }
        fn list(
            &self,
            prefix: Option<&ObjectPath>,
        ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>>
        {
            self.0.list(prefix)
        }
        async fn list_with_delimiter(
            &self,
            prefix: Option<&ObjectPath>,
        ) -> object_store::Result<object_store::ListResult> {
            self.0.list_with_delimiter(prefix).await
        }
        async fn copy(&self, from: &ObjectPath, to: &ObjectPath) -> object_store::Result<()> {
            self.0.copy(from, to).await
        }
        async fn copy_if_not_exists(
            &self,
            from: &ObjectPath,
            to: &ObjectPath,
        ) -> object_store::Result<()> {
            self.0.copy_if_not_exists(from, to).await
        }
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

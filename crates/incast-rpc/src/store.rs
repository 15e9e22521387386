//! Where a server's fragments come from: the [`FragmentStore`] trait and two stores, and
//! query handlers ([`QueryHandler`], attached with [`WithQueries`]).
//!
//! A store serves byte ranges of objects (and, for fragments of unknown length, the size of an
//! object: [`FragmentStore::size`]). A query handler answers an opaque query with bytes whose
//! size it learns only by computing them: a search shard's matches, an aggregate. The server
//! announces that size in the response's first frame, and the client schedules the transfer
//! like any other fragment's (see [`incast_core::Fragment::query`]). A long answer is read in
//! several requests; the server keeps each answer for a short while
//! ([`crate::ServerConfigBuilder::answer_cache_bytes`]) so a handler runs once per query, not
//! once per request.
//!
//! [`MemStore`] serves `Bytes` slices of objects held in memory (zero copy: a response shares
//! the object's buffer). [`FileStore`] serves files under a root directory, reading with
//! positioned reads on tokio's blocking pool; a response is allocated only after the range
//! has been checked against the file's size, so a request can never make the server allocate
//! more than the file holds.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;

/// Why a store could not serve a range.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// No object has this key.
    #[error("no object `{key}`")]
    NotFound {
        /// The key.
        key: String,
    },
    /// The range is (partly) outside the object.
    #[error("range {offset}+{len} is outside object `{key}` of {size} bytes")]
    OutOfRange {
        /// The key.
        key: String,
        /// Offset asked for.
        offset: u64,
        /// Length asked for.
        len: u64,
        /// The object's size.
        size: u64,
    },
    /// The key cannot name an object of this store.
    #[error("bad key `{key}`: {reason}")]
    BadKey {
        /// The key.
        key: String,
        /// Why.
        reason: &'static str,
    },
    /// The object or answer is larger than the client accepts (the request's size limit).
    #[error("`{key}` is {size} bytes, the request accepts at most {limit}")]
    TooLarge {
        /// The key.
        key: String,
        /// Its size (for an answer computed only up to the limit, more than `limit`).
        size: u64,
        /// The request's limit.
        limit: u64,
    },
    /// The store cannot do this (a store without sizes, or without a query handler).
    #[error("this server's store does not support {what}")]
    Unsupported {
        /// What was asked for.
        what: &'static str,
    },
    /// Reading failed.
    #[error("reading `{key}`: {source}")]
    Io {
        /// The key.
        key: String,
        /// The I/O error.
        source: io::Error,
    },
}

/// Serves byte ranges of objects. Implement it for your storage; the server calls it once
/// per request, with `len` already bounded by the server's request limit.
pub trait FragmentStore: Send + Sync + 'static {
    /// Exactly `len` bytes of `key` from `offset`, or an error. Never a short read.
    fn read(&self, key: &str, offset: u64, len: u64) -> impl Future<Output = Result<Bytes, StoreError>> + Send;

    /// The size of object `key` in bytes, for fragments of unknown length
    /// ([`incast_core::Fragment::up_to`]). The default says [`StoreError::Unsupported`].
    fn size(&self, key: &str) -> impl Future<Output = Result<u64, StoreError>> + Send {
        let _ = key;
        std::future::ready(Err(StoreError::Unsupported { what: "object sizes" }))
    }

    /// The answer to `query` against `key`, at most `limit` bytes (a longer answer may be
    /// refused with [`StoreError::TooLarge`] as soon as it is known to be longer). The
    /// default says [`StoreError::Unsupported`]; attach a [`QueryHandler`] with
    /// [`WithQueries`].
    fn query(&self, key: &str, query: &[u8], limit: u64) -> impl Future<Output = Result<Bytes, StoreError>> + Send {
        let _ = (key, query, limit);
        std::future::ready(Err(StoreError::Unsupported { what: "queries" }))
    }
}

/// Answers queries whose answer size nobody knows in advance (partition-aggregate: a search
/// shard's matches). The server calls it once per distinct query while the answer is cached,
/// with `limit` the most bytes the client accepts (never more than the server's
/// [`crate::ServerConfigBuilder::max_answer_bytes`]).
pub trait QueryHandler: Send + Sync + 'static {
    /// The answer to `query` against `key`, at most `limit` bytes, or an error
    /// ([`StoreError::TooLarge`] for a longer one).
    fn answer(&self, key: &str, query: &[u8], limit: u64) -> impl Future<Output = Result<Bytes, StoreError>> + Send;
}

/// A synchronous query handler from a closure, run inline on the connection's task: keep it
/// short (an index lookup), or implement [`QueryHandler`] with `spawn_blocking` for heavy work.
///
/// ```
/// use bytes::Bytes;
/// use incast_rpc::store::{MemStore, QueryFn, WithQueries};
/// // Answers "count:<word>" with the word repeated, as a stand-in for a search shard.
/// let shard = WithQueries::new(MemStore::new(), QueryFn(|_key: &str, q: &[u8], _limit: u64| {
///     Ok(Bytes::from(q.repeat(3)))
/// }));
/// # let _ = shard;
/// ```
#[derive(Clone, Copy, Debug)]
pub struct QueryFn<F>(pub F);

impl<F> QueryHandler for QueryFn<F>
where
    F: Fn(&str, &[u8], u64) -> Result<Bytes, StoreError> + Send + Sync + 'static,
{
    fn answer(&self, key: &str, query: &[u8], limit: u64) -> impl Future<Output = Result<Bytes, StoreError>> + Send {
        std::future::ready((self.0)(key, query, limit))
    }
}

/// A store that also answers queries: ranges and sizes from `S`, queries from `H`.
#[derive(Clone, Debug)]
pub struct WithQueries<S, H> {
    store: S,
    handler: H,
}

impl<S: FragmentStore, H: QueryHandler> WithQueries<S, H> {
    /// `store`, answering queries with `handler`.
    pub fn new(store: S, handler: H) -> Self {
        Self { store, handler }
    }
}

impl<S: FragmentStore, H: QueryHandler> FragmentStore for WithQueries<S, H> {
    fn read(&self, key: &str, offset: u64, len: u64) -> impl Future<Output = Result<Bytes, StoreError>> + Send {
        self.store.read(key, offset, len)
    }
    fn size(&self, key: &str) -> impl Future<Output = Result<u64, StoreError>> + Send {
        self.store.size(key)
    }
    fn query(&self, key: &str, query: &[u8], limit: u64) -> impl Future<Output = Result<Bytes, StoreError>> + Send {
        self.handler.answer(key, query, limit)
    }
}

fn check_range(key: &str, offset: u64, len: u64, size: u64) -> Result<(), StoreError> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(StoreError::OutOfRange {
            key: key.to_owned(),
            offset,
            len,
            size,
        }),
    }
}

/// Objects in memory.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use incast_rpc::store::{FragmentStore, MemStore};
/// let store = MemStore::new();
/// store.insert("blk", vec![1, 2, 3, 4]);
/// assert_eq!(&store.read("blk", 1, 2).await.unwrap()[..], &[2, 3]);
/// assert!(store.read("blk", 3, 2).await.is_err());
/// # });
/// ```
#[derive(Debug, Default, Clone)]
pub struct MemStore {
    objects: Arc<RwLock<HashMap<String, Bytes>>>,
}

impl MemStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
    /// Adds or replaces an object.
    pub fn insert(&self, key: impl Into<String>, data: impl Into<Bytes>) {
        self.objects
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.into(), data.into());
    }
    /// Removes an object.
    pub fn remove(&self, key: &str) -> Option<Bytes> {
        self.objects.write().unwrap_or_else(|e| e.into_inner()).remove(key)
    }
    fn get(&self, key: &str) -> Option<Bytes> {
        self.objects.read().unwrap_or_else(|e| e.into_inner()).get(key).cloned()
    }
}

impl FragmentStore for MemStore {
    async fn read(&self, key: &str, offset: u64, len: u64) -> Result<Bytes, StoreError> {
        let obj = self
            .get(key)
            .ok_or_else(|| StoreError::NotFound { key: key.to_owned() })?;
        check_range(key, offset, len, obj.len() as u64)?;
        Ok(obj.slice(offset as usize..(offset + len) as usize))
    }
    async fn size(&self, key: &str) -> Result<u64, StoreError> {
        let obj = self
            .get(key)
            .ok_or_else(|| StoreError::NotFound { key: key.to_owned() })?;
        Ok(obj.len() as u64)
    }
}

/// A store that answers after a delay, or never (`Duration::MAX`): a slow disk or a hung
/// server, for tests, examples and failure drills. A zero delay answers at once (no trip
/// through the timer wheel, which would cost a millisecond tick).
///
/// ```
/// use std::time::Duration;
/// use incast_rpc::store::{Delayed, MemStore};
/// let slow = Delayed::new(MemStore::new(), Duration::from_millis(30));
/// let hung = Delayed::new(MemStore::new(), Duration::MAX);
/// # let _ = (slow, hung);
/// ```
#[derive(Debug, Clone)]
pub struct Delayed<S> {
    inner: S,
    delay: Duration,
}

impl<S: FragmentStore> Delayed<S> {
    /// `inner`, answering `delay` late (`Duration::MAX`: never).
    pub fn new(inner: S, delay: Duration) -> Self {
        Self { inner, delay }
    }
}

impl<S: FragmentStore> FragmentStore for Delayed<S> {
    async fn read(&self, key: &str, offset: u64, len: u64) -> Result<Bytes, StoreError> {
        self.wait().await;
        self.inner.read(key, offset, len).await
    }
    async fn size(&self, key: &str) -> Result<u64, StoreError> {
        self.wait().await;
        self.inner.size(key).await
    }
    async fn query(&self, key: &str, query: &[u8], limit: u64) -> Result<Bytes, StoreError> {
        self.wait().await;
        self.inner.query(key, query, limit).await
    }
}

impl<S> Delayed<S> {
    async fn wait(&self) {
        if self.delay == Duration::MAX {
            std::future::pending::<()>().await;
        }
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
    }
}

/// Files under a root directory; the key is a relative path (`a/b/c`), with no `..`, no
/// absolute paths and no empty components.
///
/// **Contained.** Keys are checked as text, and every file is then opened with `openat2(2)`
/// relative to the root with `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`, so a symlink inside the
/// root that points outside it (`ln -s /etc/shadow obj`) is refused with
/// [`StoreError::BadKey`], while symlinks that stay beneath the root work. This needs Linux
/// 5.6 or later; an older kernel gets an I/O error, never an unchecked open.
#[derive(Debug, Clone)]
pub struct FileStore {
    root: Arc<PathBuf>,
}

impl FileStore {
    /// Serves files under `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: Arc::new(root.into()),
        }
    }

    fn path(&self, key: &str) -> Result<PathBuf, StoreError> {
        let bad = |reason| {
            Err(StoreError::BadKey {
                key: key.to_owned(),
                reason,
            })
        };
        if key.is_empty() {
            return bad("empty");
        }
        let p = Path::new(key);
        if !p.components().all(|c| matches!(c, Component::Normal(_))) || key.ends_with('/') || key.contains("//") {
            return bad("must be a relative path without `.`, `..` or empty components");
        }
        Ok(p.to_owned())
    }
}

/// Opens `rel` beneath `root`: no component, symlinks included, may resolve outside it.
fn open_beneath(root: &Path, rel: &Path) -> io::Result<std::fs::File> {
    use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag};
    let dir = std::fs::File::open(root)?;
    let how = OpenHow::new()
        .flags(OFlag::O_RDONLY | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    Ok(std::fs::File::from(openat2(&dir, rel, how)?))
}

impl FileStore {
    /// Runs `f` on the opened file and its size, on the blocking pool.
    async fn with_file<T: Send + 'static>(
        &self,
        key: &str,
        f: impl FnOnce(&std::fs::File, u64, &str) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let rel = self.path(key)?;
        let root = self.root.clone();
        let key = key.to_owned();
        tokio::task::spawn_blocking(move || {
            let file = open_beneath(&root, &rel).map_err(|e| io_error(&key, e))?;
            let size = file.metadata().map_err(|e| io_error(&key, e))?.len();
            f(&file, size, &key)
        })
        .await
        .map_err(|e| StoreError::Io {
            key: String::new(),
            source: io::Error::other(e),
        })?
    }
}

fn io_error(key: &str, source: io::Error) -> StoreError {
    match source.kind() {
        io::ErrorKind::NotFound => StoreError::NotFound { key: key.to_owned() },
        _ if source.raw_os_error() == Some(libc::EXDEV) || source.raw_os_error() == Some(libc::ELOOP) => {
            StoreError::BadKey {
                key: key.to_owned(),
                reason: "resolves outside the store's root (through a symlink)",
            }
        }
        _ => StoreError::Io {
            key: key.to_owned(),
            source,
        },
    }
}

impl FragmentStore for FileStore {
    async fn read(&self, key: &str, offset: u64, len: u64) -> Result<Bytes, StoreError> {
        self.with_file(key, move |file, size, key| {
            use std::os::unix::fs::FileExt;
            check_range(key, offset, len, size)?;
            // Bounded by the file's size, checked above.
            let mut buf = vec![0u8; len as usize];
            file.read_exact_at(&mut buf, offset).map_err(|e| io_error(key, e))?;
            Ok(Bytes::from(buf))
        })
        .await
    }
    async fn size(&self, key: &str) -> Result<u64, StoreError> {
        self.with_file(key, |_, size, _| Ok(size)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().build().unwrap()
    }

    #[test]
    fn mem_store_ranges() {
        rt().block_on(async {
            let s = MemStore::new();
            s.insert("k", (0u8..100).collect::<Vec<_>>());
            assert_eq!(&s.read("k", 10, 3).await.unwrap()[..], &[10, 11, 12]);
            assert_eq!(s.read("k", 100, 0).await.unwrap().len(), 0);
            assert!(matches!(
                s.read("k", 99, 2).await,
                Err(StoreError::OutOfRange { size: 100, .. })
            ));
            assert!(matches!(
                s.read("k", u64::MAX, 2).await,
                Err(StoreError::OutOfRange { .. })
            ));
            assert!(matches!(s.read("x", 0, 1).await, Err(StoreError::NotFound { .. })));
            assert_eq!(s.size("k").await.unwrap(), 100);
            assert!(matches!(s.size("x").await, Err(StoreError::NotFound { .. })));
            // No handler: queries are unsupported, typed.
            assert!(matches!(
                s.query("k", b"q", 10).await,
                Err(StoreError::Unsupported { .. })
            ));
            let q = WithQueries::new(
                s,
                QueryFn(|k: &str, q: &[u8], _| Ok(Bytes::from([k.as_bytes(), q].concat()))),
            );
            assert_eq!(&q.query("ab", b"c", 10).await.unwrap()[..], b"abc");
            assert_eq!(q.size("k").await.unwrap(), 100);
        });
    }

    #[test]
    fn file_store_ranges_and_keys() {
        rt().block_on(async {
            let dir = std::env::temp_dir().join(format!("incast-filestore-{}", std::process::id()));
            std::fs::create_dir_all(dir.join("a")).unwrap();
            std::fs::write(dir.join("a/obj"), (0u8..=255).collect::<Vec<_>>()).unwrap();
            let s = FileStore::new(&dir);
            assert_eq!(
                &s.read("a/obj", 250, 6).await.unwrap()[..],
                &[250, 251, 252, 253, 254, 255]
            );
            assert!(matches!(
                s.read("a/obj", 250, 7).await,
                Err(StoreError::OutOfRange { size: 256, .. })
            ));
            // A huge request is refused before anything is allocated.
            assert!(matches!(
                s.read("a/obj", 0, 1 << 40).await,
                Err(StoreError::OutOfRange { .. })
            ));
            assert!(matches!(s.read("a/none", 0, 1).await, Err(StoreError::NotFound { .. })));
            assert_eq!(s.size("a/obj").await.unwrap(), 256);
            assert!(matches!(s.size("a/none").await, Err(StoreError::NotFound { .. })));
            for bad in ["", "/etc/passwd", "../x", "a/../a/obj", "a//obj", "./a/obj", "a/"] {
                assert!(
                    matches!(s.read(bad, 0, 1).await, Err(StoreError::BadKey { .. })),
                    "{bad}"
                );
            }
            std::fs::remove_dir_all(&dir).unwrap();
        });
    }

    #[test]
    fn file_store_does_not_follow_symlinks_out_of_its_root() {
        rt().block_on(async {
            let base = std::env::temp_dir().join(format!("incast-contained-{}", std::process::id()));
            let (root, outside) = (base.join("root"), base.join("outside"));
            std::fs::create_dir_all(root.join("a")).unwrap();
            std::fs::create_dir_all(&outside).unwrap();
            std::fs::write(root.join("a/obj"), b"inside").unwrap();
            std::fs::write(outside.join("secret"), b"secret").unwrap();
            let link = |target: &Path, name: &str| std::os::unix::fs::symlink(target, root.join(name)).unwrap();
            link(&outside.join("secret"), "escape"); // absolute, outside
            link(Path::new("../outside/secret"), "climb"); // relative, outside
            link(&outside, "dir"); // a directory outside
            link(Path::new("a/obj"), "inner"); // stays beneath the root
            let s = FileStore::new(&root);
            for key in ["escape", "climb", "dir/secret"] {
                match s.read(key, 0, 6).await {
                    Err(StoreError::BadKey { reason, .. }) => assert!(reason.contains("outside"), "{key}: {reason}"),
                    other => panic!("{key}: read through a symlink out of the root: {other:?}"),
                }
            }
            assert_eq!(&s.read("inner", 0, 6).await.unwrap()[..], b"inside");
            assert_eq!(&s.read("a/obj", 0, 6).await.unwrap()[..], b"inside");
            std::fs::remove_dir_all(&base).unwrap();
        });
    }
}

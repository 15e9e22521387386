//! Where a server's fragments come from: the [`FragmentStore`] trait and two stores.
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
        if self.delay == Duration::MAX {
            std::future::pending::<()>().await;
        }
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        self.inner.read(key, offset, len).await
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

impl FragmentStore for FileStore {
    async fn read(&self, key: &str, offset: u64, len: u64) -> Result<Bytes, StoreError> {
        let rel = self.path(key)?;
        let root = self.root.clone();
        let key = key.to_owned();
        tokio::task::spawn_blocking(move || {
            use std::os::unix::fs::FileExt;
            let io_err = |source: io::Error| match source.kind() {
                io::ErrorKind::NotFound => StoreError::NotFound { key: key.clone() },
                _ if source.raw_os_error() == Some(libc::EXDEV) || source.raw_os_error() == Some(libc::ELOOP) => {
                    StoreError::BadKey {
                        key: key.clone(),
                        reason: "resolves outside the store's root (through a symlink)",
                    }
                }
                _ => StoreError::Io {
                    key: key.clone(),
                    source,
                },
            };
            let file = open_beneath(&root, &rel).map_err(io_err)?;
            let size = file.metadata().map_err(io_err)?.len();
            check_range(&key, offset, len, size)?;
            // Bounded by the file's size, checked above.
            let mut buf = vec![0u8; len as usize];
            file.read_exact_at(&mut buf, offset).map_err(io_err)?;
            Ok(Bytes::from(buf))
        })
        .await
        .map_err(|e| StoreError::Io {
            key: String::new(),
            source: io::Error::other(e),
        })?
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

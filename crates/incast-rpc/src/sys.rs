//! Every raw system call of the crate, in one place. The rest of the crate is safe code.
//!
//! socket2 lacks TCP_WINDOW_CLAMP, SO_MAX_PACING_RATE and TCP_INFO, the libc crate lacks the
//! per-socket RTO options of Linux 6.15+, and tokio's `AsyncFd::register` is `unsafe` since
//! 1.53 (I/O safety). Each function below states why its `unsafe` block is sound.
#![allow(unsafe_code)]

use std::io;
use std::mem::{size_of, MaybeUninit};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// `setsockopt` with a plain-old-data value.
pub(crate) fn set_opt<T: Copy>(fd: BorrowedFd<'_>, level: i32, name: i32, value: T) -> io::Result<()> {
    // SAFETY: `fd` is a live descriptor for the borrow; the pointer and length describe
    // `value`, which outlives the call; the kernel only reads `size_of::<T>()` bytes.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&value as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `setsockopt` with a byte string (TCP_CONGESTION).
pub(crate) fn set_opt_bytes(fd: BorrowedFd<'_>, level: i32, name: i32, value: &[u8]) -> io::Result<()> {
    // SAFETY: as in `set_opt`; the slice is valid for `value.len()` bytes.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            value.as_ptr().cast(),
            value.len() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `getsockopt` into a byte buffer; returns the length the kernel wrote.
pub(crate) fn get_opt_bytes(fd: BorrowedFd<'_>, level: i32, name: i32, buf: &mut [u8]) -> io::Result<usize> {
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: the pointer and `len` describe `buf`, writable for its length; the kernel
    // writes at most `len` bytes and stores the length it wrote in `len`.
    let r = unsafe { libc::getsockopt(fd.as_raw_fd(), level, name, buf.as_mut_ptr().cast(), &mut len) };
    if r == 0 {
        Ok((len as usize).min(buf.len()))
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `getsockopt` of an integer option (`int` or `u64`, by `size_of::<T>()`).
pub(crate) fn get_int<const N: usize>(fd: BorrowedFd<'_>, level: i32, name: i32) -> io::Result<u64> {
    let mut buf = [0u8; N];
    let n = get_opt_bytes(fd, level, name, &mut buf)?;
    Ok(match n {
        4 => u64::from(u32::from_ne_bytes(buf[..4].try_into().expect("4 bytes"))),
        8 => u64::from_ne_bytes(buf[..8].try_into().expect("8 bytes")),
        1 => u64::from(buf[0]),
        _ => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("option returned {n} bytes"),
            ))
        }
    })
}

/// TCP_INFO: the kernel's struct and how many bytes of it the kernel filled (older kernels
/// fill fewer: fields beyond that length are zero and must not be trusted).
pub(crate) fn tcp_info(fd: BorrowedFd<'_>) -> io::Result<(libc::tcp_info, usize)> {
    let mut info = MaybeUninit::<libc::tcp_info>::zeroed();
    let mut len = size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: the buffer is a zeroed `tcp_info`, writable for `len` bytes; the kernel writes
    // at most `len` bytes.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: zero is a valid value of every (integer) field, and the kernel wrote valid
    // integers into a prefix.
    Ok((unsafe { info.assume_init() }, len as usize))
}

/// A non-blocking, close-on-exec timerfd on CLOCK_MONOTONIC (the clock of `Instant`).
pub(crate) fn timerfd_create() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with constant arguments.
    let fd = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Arms a one-shot timer `after` from now (at least 1 ns: 0 would disarm it), or disarms it.
pub(crate) fn timerfd_set(fd: BorrowedFd<'_>, after: Option<Duration>) -> io::Result<()> {
    let value = match after {
        Some(d) => {
            let d = d.max(Duration::from_nanos(1));
            libc::timespec {
                tv_sec: d.as_secs().min(i64::MAX as u64) as libc::time_t,
                tv_nsec: d.subsec_nanos() as libc::c_long,
            }
        }
        None => libc::timespec { tv_sec: 0, tv_nsec: 0 },
    };
    let spec = libc::itimerspec {
        it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
        it_value: value,
    };
    // SAFETY: `spec` is a valid itimerspec for the call; no old value is requested.
    let r = unsafe { libc::timerfd_settime(fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Reads the expiration count of a timerfd (non-blocking: `WouldBlock` if it has not fired).
pub(crate) fn timerfd_read(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let mut buf = [0u8; 8];
    // SAFETY: `buf` is writable for 8 bytes, the size a timerfd read returns.
    let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    match n {
        8 => Ok(u64::from_ne_bytes(buf)),
        n if n < 0 => Err(io::Error::last_os_error()),
        n => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("timerfd read returned {n} bytes"),
        )),
    }
}

/// Registers an owned descriptor with tokio's reactor.
pub(crate) fn async_fd(fd: OwnedFd) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: the `OwnedFd` moves into the `AsyncFd`, which keeps it open until the `AsyncFd`
    // is dropped (deregistering first), so the registered descriptor cannot be closed or
    // reused behind the reactor's back.
    unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }.map_err(|e| e.into())
}

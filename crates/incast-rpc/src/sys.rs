//! Every raw system call of the crate, in one place. The rest of the crate is safe code.
//!
//! What maintained crates cover goes through them: the timerfd through nix, TCP_CONGESTION
//! through socket2 (in `tune`). What is left here has no safe wrapper: socket2 lacks
//! TCP_WINDOW_CLAMP, SO_MAX_PACING_RATE, TCP_INFO and the per-socket RTO options of Linux
//! 6.15+ (nix's socket options lack them too, and its TCP_INFO getter panics on a kernel that
//! returns a shorter struct), and tokio's `AsyncFd::register_with_interest` is `unsafe` since
//! 1.53 (I/O safety). Each function below states why its `unsafe` block is sound.
#![allow(unsafe_code)]

use std::io;
use std::mem::{size_of, MaybeUninit};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::time::{Duration, SystemTime};

use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// Dissolves a connected TCP socket at once: `connect` to an `AF_UNSPEC` address makes
/// Linux send a reset and forget the connection (`tcp_disconnect`), while the descriptor
/// stays open (other handles to it then see it closed). socket2 and nix build no `AF_UNSPEC`
/// address; closing with SO_LINGER 0 does the same but needs the last handle.
pub(crate) fn disconnect(fd: BorrowedFd<'_>) -> io::Result<()> {
    let addr = libc::sockaddr {
        sa_family: libc::AF_UNSPEC as libc::sa_family_t,
        sa_data: [0; 14],
    };
    // SAFETY: `fd` is a live descriptor for the borrow; the pointer and length describe
    // `addr`, a whole `sockaddr` that outlives the call.
    let r = unsafe { libc::connect(fd.as_raw_fd(), &addr, size_of::<libc::sockaddr>() as libc::socklen_t) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

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

/// Turns on the kernel's receive timestamps of a socket (`SO_TIMESTAMPNS`, CLOCK_REALTIME),
/// through nix: [`recv_stamped`] then says when the bytes it read reached the host.
pub(crate) fn receive_timestamps(fd: BorrowedFd<'_>) -> io::Result<()> {
    nix::sys::socket::setsockopt(&fd, nix::sys::socket::sockopt::ReceiveTimestampns, &true)?;
    Ok(())
}

/// `recv` into `buf` that also returns the kernel's receive timestamp of the segment the
/// last byte read came from (for TCP, Linux's `tcp_recv_timestamp`), if the socket has them
/// on ([`receive_timestamps`]); through nix's `recvmsg`, with the control buffer on the stack.
pub(crate) fn recv_stamped(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<(usize, Option<SystemTime>)> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    let mut iov = [io::IoSliceMut::new(buf)];
    // CMSG_SPACE of a timespec is 32 bytes on 64-bit Linux; a truncated control message
    // only loses the stamp.
    let mut cmsg = [0u8; 64];
    let msg = recvmsg::<()>(fd.as_raw_fd(), &mut iov, Some(&mut cmsg), MsgFlags::MSG_DONTWAIT)?;
    let mut at = None;
    if let Ok(cmsgs) = msg.cmsgs() {
        for c in cmsgs {
            if let ControlMessageOwned::ScmTimestampns(ts) = c {
                let (s, ns) = (u64::try_from(ts.tv_sec()), u32::try_from(ts.tv_nsec()));
                if let (Ok(s), Ok(ns)) = (s, ns) {
                    at = SystemTime::UNIX_EPOCH.checked_add(Duration::new(s, ns));
                }
            }
        }
    }
    Ok((msg.bytes, at))
}

/// A non-blocking, close-on-exec timerfd on CLOCK_MONOTONIC (the clock of `Instant`), through
/// nix. tokio's `AsyncFd` wants `AsRawFd`, which nix's `TimerFd` (an `AsFd`) does not have.
#[derive(Debug)]
pub(crate) struct Timerfd(TimerFd);

impl AsRawFd for Timerfd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

impl Timerfd {
    pub(crate) fn new() -> io::Result<Self> {
        Ok(Self(TimerFd::new(
            ClockId::CLOCK_MONOTONIC,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )?))
    }

    /// Arms a one-shot timer `after` from now (at least 1 ns: 0 would disarm it), or disarms it.
    pub(crate) fn set(&self, after: Option<Duration>) -> io::Result<()> {
        match after {
            Some(d) => self.0.set(
                Expiration::OneShot(TimeSpec::from_duration(d.max(Duration::from_nanos(1)))),
                TimerSetTimeFlags::empty(),
            )?,
            None => self.0.unset()?,
        }
        Ok(())
    }

    /// Consumes an expiration (non-blocking: `WouldBlock` if it has not fired).
    pub(crate) fn read(&self) -> io::Result<()> {
        Ok(self.0.wait()?)
    }
}

/// Registers a timerfd with tokio's reactor.
pub(crate) fn async_timerfd(fd: Timerfd) -> io::Result<AsyncFd<Timerfd>> {
    // SAFETY: the `Timerfd` owns its descriptor (nix's `TimerFd` holds an `OwnedFd`) and moves
    // into the `AsyncFd`, which keeps it open until the `AsyncFd` is dropped (deregistering
    // first), so the registered descriptor cannot be closed or reused behind the reactor's back.
    unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }.map_err(|e| e.into())
}

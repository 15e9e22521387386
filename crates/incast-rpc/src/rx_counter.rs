//! The receive counter of the client's network interface: what the port passed, of every
//! flow through it.
//!
//! The client-wide receiver measures the port's rate from its own bytes, and beside bulk
//! flows its own bytes are only the reads' share: a port of 1 Gbit/s read as 500-600 Mbit/s
//! there, and the rules that tell the reads' own queue from another's then judged against a
//! port slower than it is (see [`incast_core::receiver`], "The port's counter"). The
//! interface's receive counter counts every byte the port delivered, the other flows' too;
//! sampled over the receiver's busy time it reads the port's rate whoever fills it.
//!
//! The interface is the one holding the local address of the client's first TCP
//! connection (`getifaddrs`), and the counter its `rx_bytes` in `/proc/thread-self/net/dev`,
//! opened by the thread that made the connection: a process's threads may live in
//! different network namespaces (the testbed's client does), and an open `/proc/.../net`
//! file stays bound to the namespace it was opened in, where `/sys/class/net` shows the
//! namespace sysfs was mounted in. Where there is none to find (a QUIC-only client, an
//! address no interface holds, no procfs), the receiver measures from its own bytes as
//! before. The file stays open and is read again from offset 0 (procfs regenerates it
//! there), at most once per [`READ_EVERY`], and less often where a reading is slow (a
//! namespace with hundreds of interfaces): a reading takes at most [`MAX_READ_SHARE`] of the
//! time between two.

use std::fs::File;
use std::io;
use std::net::IpAddr;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

/// Shortest time between two readings of the counter (1 ms): a sample of the port's rate
/// spans at least 5 ms (`incast_core::receiver::RATE_SAMPLE_SPAN`), so a few readings
/// make one, and a reading stays out of the per-byte path.
pub(crate) const READ_EVERY: Duration = Duration::from_millis(1);

/// A reading may take at most this share of the time between readings (1%): the kernel
/// writes a line for every interface of the namespace, and a host with hundreds of them
/// (a container host's veths) makes a reading cost far more than the few microseconds of a
/// namespace with two. A reading that took `d` puts the next one at least `d / share` later.
pub(crate) const MAX_READ_SHARE: f64 = 0.01;

/// An open receive counter of one interface.
#[derive(Debug)]
pub(crate) struct RxCounter {
    file: File,
    interface: String,
    /// The file's text at the last reading (kept for its allocation).
    text: Vec<u8>,
    last: Option<Instant>,
    /// The time between two readings ([`READ_EVERY`] at least).
    every: Duration,
}

impl RxCounter {
    /// The counter of the interface holding `local`, read once to check it.
    pub(crate) fn for_address(local: IpAddr) -> io::Result<Self> {
        let interface = interface_of(local)?;
        let file = File::open(DEV_STATS).map_err(|e| io::Error::new(e.kind(), format!("opening {DEV_STATS}: {e}")))?;
        let mut c = Self {
            file,
            interface,
            text: Vec::new(),
            last: None,
            every: READ_EVERY,
        };
        c.read()?;
        Ok(c)
    }

    /// The interface's name (for the `tracing` event that names it).
    #[cfg_attr(not(any(test, feature = "tracing")), allow(dead_code))]
    pub(crate) fn interface(&self) -> &str {
        &self.interface
    }

    /// The bytes the interface received so far.
    fn read(&mut self) -> io::Result<u64> {
        self.text.clear();
        let mut chunk = [0u8; 4096];
        loop {
            let n = self.file.read_at(&mut chunk, self.text.len() as u64)?;
            if n == 0 {
                break;
            }
            if self.text.len() + n > MAX_DEV_STATS {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{DEV_STATS} is longer than {MAX_DEV_STATS} bytes"),
                ));
            }
            self.text.extend_from_slice(&chunk[..n]);
        }
        rx_bytes_of(&self.text, &self.interface).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{DEV_STATS} has no receive counter of {}", self.interface),
            )
        })
    }

    /// Reads the counter if its interval passed since the last reading (by `now`; at least
    /// [`READ_EVERY`], longer where readings are slow, see [`MAX_READ_SHARE`]): when it was
    /// read (just after the read) and what it said. A failed read gives nothing.
    pub(crate) fn poll(&mut self, now: Instant) -> Option<(Instant, u64)> {
        if self.last.is_some_and(|t| now < t + self.every) {
            return None;
        }
        let began = Instant::now();
        let v = self.read();
        let at = Instant::now();
        self.last = Some(at);
        self.every = READ_EVERY.max((at - began).div_f64(MAX_READ_SHARE));
        Some((at, v.ok()?))
    }

    /// The time between two readings now.
    #[cfg(test)]
    fn interval(&self) -> Duration {
        self.every
    }
}

/// The interfaces' counters of the calling thread's network namespace.
const DEV_STATS: &str = "/proc/thread-self/net/dev";

/// The longest `/proc/net/dev` read (256 KiB: some 2,000 interfaces).
const MAX_DEV_STATS: usize = 256 << 10;

/// The received bytes of `interface` in the text of `/proc/net/dev`: lines of
/// `name: rx_bytes rx_packets ...` after two lines of headers.
fn rx_bytes_of(text: &[u8], interface: &str) -> Option<u64> {
    let text = std::str::from_utf8(text).ok()?;
    text.lines().skip(2).find_map(|line| {
        let (name, counters) = line.split_once(':')?;
        (name.trim() == interface).then(|| counters.split_whitespace().next()?.parse().ok())?
    })
}

/// The name of the interface that holds address `local` (an IPv4-mapped IPv6 address as
/// its IPv4 one), without an alias's `:n` suffix.
fn interface_of(local: IpAddr) -> io::Result<String> {
    let local = local.to_canonical();
    let addrs = nix::ifaddrs::getifaddrs().map_err(|e| io::Error::other(format!("getifaddrs: {e}")))?;
    for a in addrs {
        let Some(sa) = a.address else { continue };
        let ip = match (sa.as_sockaddr_in(), sa.as_sockaddr_in6()) {
            (Some(v4), _) => IpAddr::V4(v4.ip()),
            (_, Some(v6)) => IpAddr::V6(v6.ip()),
            _ => continue,
        };
        if ip == local {
            let name = a.interface_name.split(':').next().unwrap_or_default().to_string();
            return Ok(name);
        }
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        format!("no interface holds the client's address {local}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn the_counter_is_the_first_number_of_the_interfaces_line() {
        let dev = b"Inter-|   Receive                            |  Transmit\n \
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets\n\
    lo: 123456     789    0    0    0     0          0         0   123456     789\n\
incast-c0: 42 3    0    0    0     0          0         0        7       1\n\
  eth0:9 1 0 0 0 0 0 0 0 0\n";
        assert_eq!(rx_bytes_of(dev, "lo"), Some(123_456));
        assert_eq!(rx_bytes_of(dev, "incast-c0"), Some(42));
        assert_eq!(rx_bytes_of(dev, "eth0"), Some(9));
        assert_eq!(rx_bytes_of(dev, "eth1"), None);
        // A header is not an interface, and a line without a number is no counter.
        assert_eq!(rx_bytes_of(dev, "Inter-|   Receive"), None);
        assert_eq!(rx_bytes_of(b"h\nh\n  x: abc 1\n", "x"), None);
        assert_eq!(rx_bytes_of(b"\xff\xfe", "x"), None);
    }

    #[test]
    fn loopback_is_found_and_its_counter_grows_with_traffic() {
        let mut c = match RxCounter::for_address(IpAddr::V4(Ipv4Addr::LOCALHOST)) {
            Ok(c) => c,
            // A sandbox without sysfs or without `lo` up: nothing to check here.
            Err(e) => {
                eprintln!("skipped: {e}");
                return;
            }
        };
        assert_eq!(c.interface(), "lo");
        let before = c.read().unwrap();
        let sock = std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let to = sock.local_addr().unwrap();
        for _ in 0..4 {
            sock.send_to(&[7u8; 1000], to).unwrap();
        }
        let after = c.read().unwrap();
        assert!(after >= before + 4000, "{before} -> {after}");
        // At most one reading per interval, READ_EVERY at least.
        let began = Instant::now();
        assert!(c.poll(began).is_some());
        let took = began.elapsed();
        assert!(c.poll(Instant::now()).is_none());
        assert!(c.interval() >= READ_EVERY);
        println!("one reading of {DEV_STATS}: {took:?}; interval {:?}", c.interval());
    }

    #[test]
    fn an_address_no_interface_holds_is_an_error_that_names_it() {
        // 198.51.100.0/24 is TEST-NET-2: no interface here holds it.
        let a = IpAddr::V4(Ipv4Addr::new(198, 51, 100, 7));
        let e = interface_of(a).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("198.51.100.7"), "{e}");
        // An IPv4-mapped loopback is loopback.
        if let Ok(name) = interface_of(IpAddr::V6(Ipv4Addr::LOCALHOST.to_ipv6_mapped())) {
            assert_eq!(name, "lo");
        }
    }
}

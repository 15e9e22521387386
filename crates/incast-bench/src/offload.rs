//! Segmentation offloads (TSO, GSO, GRO) through the kernel's ethtool ioctl, without the
//! `ethtool` binary, which a fresh Debian machine does not have (iproute2 it has).
//!
//! The testbed decides how faithful it is through these switches (see [`crate::testbed`]):
//! a server host's veth keeps TSO and GSO on, so its TCP hands whole windows to the emulated
//! NIC as 64 KB super-packets, which the NIC's shaper then puts on the wire back to back at
//! line rate, as a real TSO NIC does; the client's side keeps GRO off, so every MTU packet
//! is ACKed as it arrives and the client's ACK clock stays honest.
//!
//! The legacy `ETHTOOL_S{TSO,GSO,GRO}` commands are used rather than `ETHTOOL_SFEATURES`:
//! they take one `u32` each and need no feature-name table, and every kernel since 2.6 has
//! them. No maintained crate offers a synchronous ethtool call (the `ethtool` crate is an
//! async generic-netlink client, and nix's ioctl macros only generate `unsafe` functions);
//! this module's one `unsafe` block is the ioctl itself.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

const ETHTOOL_GTSO: u32 = 0x1e;
const ETHTOOL_STSO: u32 = 0x1f;
const ETHTOOL_GGSO: u32 = 0x23;
const ETHTOOL_SGSO: u32 = 0x24;
const ETHTOOL_GGRO: u32 = 0x2b;
const ETHTOOL_SGRO: u32 = 0x2c;

/// `struct ethtool_value` of `<linux/ethtool.h>`.
#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

/// One offload the testbed switches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offload {
    /// TCP segmentation offload: TCP builds super-packets up to 64 KB.
    Tso,
    /// Generic segmentation offload: segmentation deferred to the device's transmit path.
    Gso,
    /// Generic receive offload: received packets merged before TCP sees them.
    Gro,
}

impl Offload {
    fn commands(self) -> (u32, u32) {
        match self {
            Offload::Tso => (ETHTOOL_GTSO, ETHTOOL_STSO),
            Offload::Gso => (ETHTOOL_GGSO, ETHTOOL_SGSO),
            Offload::Gro => (ETHTOOL_GGRO, ETHTOOL_SGRO),
        }
    }

    /// Its name as `ethtool -K` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Offload::Tso => "tso",
            Offload::Gso => "gso",
            Offload::Gro => "gro",
        }
    }
}

fn ioctl(sock: &OwnedFd, dev: &str, value: &mut EthtoolValue) -> io::Result<()> {
    let name = dev.as_bytes();
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("interface name `{dev}` is empty, has a NUL or is longer than 15 bytes"),
        ));
    }
    let mut ifr_name = [0 as libc::c_char; libc::IFNAMSIZ];
    for (d, s) in ifr_name.iter_mut().zip(name) {
        *d = *s as libc::c_char;
    }
    let mut req = libc::ifreq {
        ifr_name,
        ifr_ifru: libc::__c_anonymous_ifr_ifru {
            ifru_data: (value as *mut EthtoolValue).cast(),
        },
    };
    // SAFETY: SIOCETHTOOL reads the NUL-terminated name and the `ethtool_value` that
    // ifru_data points to (both live for the call); for the legacy get/set commands used here
    // the kernel reads and writes exactly that 8-byte struct.
    let r = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCETHTOOL as _, &mut req) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn control_socket() -> io::Result<OwnedFd> {
    use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType};
    Ok(socket(
        AddressFamily::Inet,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?)
}

/// Turns `offload` on or off for `dev` in the calling thread's network namespace and returns
/// what the kernel kept (a device may refuse to change, e.g. a fixed feature).
pub fn set(dev: &str, offload: Offload, on: bool) -> io::Result<bool> {
    let sock = control_socket()?;
    let set = offload.commands().1;
    ioctl(
        &sock,
        dev,
        &mut EthtoolValue {
            cmd: set,
            data: u32::from(on),
        },
    )?;
    self::get(dev, offload)
}

/// Whether `offload` is on for `dev` in the calling thread's network namespace.
pub fn get(dev: &str, offload: Offload) -> io::Result<bool> {
    let sock = control_socket()?;
    let mut v = EthtoolValue {
        cmd: offload.commands().0,
        data: 0,
    };
    ioctl(&sock, dev, &mut v)?;
    Ok(v.data != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_names_are_refused_before_the_kernel_sees_them() {
        for dev in ["", "a-name-longer-than-15", "nul\0inside"] {
            let e = get(dev, Offload::Tso).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{dev:?}");
        }
    }

    #[test]
    fn a_missing_interface_is_an_os_error() {
        let e = get("incast-none0", Offload::Gro).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENODEV), "{e}");
    }
}

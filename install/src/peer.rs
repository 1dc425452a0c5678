//! Who is on the other end of an accepted TCP connection, for the
//! exporter's per-peer limits (metrics_server.rs).
//!
//! Every local client comes from 127.0.0.1 (or ::1), so an address alone
//! would put every local user in one budget. For a loopback peer the
//! kernel knows the uid that owns the client's socket: one exact
//! NETLINK_SOCK_DIAG lookup by the connection's four-tuple (the
//! `inet_diag` query `ss` makes; no scan of /proc/net/tcp, whose cost grows
//! with every socket on the host). Remote peers are keyed by address, IPv6
//! by its /64 (what one host is usually given).
use std::io;
use std::mem::size_of;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};

/// A failed lookup is said once, not per connection.
static WARNED: AtomicBool = AtomicBool::new(false);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Peer {
    /// A loopback client whose socket this uid owns.
    Uid(u32),
    /// A remote client (an IPv6 address masked to its /64), or a loopback
    /// one whose uid could not be read.
    Addr(IpAddr),
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Peer::Uid(u) => write!(f, "local uid {u}"),
            Peer::Addr(a) => write!(f, "{a}"),
        }
    }
}

/// Unwrap an IPv4-mapped IPv6 address (a dual-stack listener's view of an
/// IPv4 client).
fn canonical(a: SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), v6.port()),
            None => a,
        },
        v4 => v4,
    }
}

/// The peer of a connection from `remote` to our `local` address.
pub fn identify(local: SocketAddr, remote: SocketAddr) -> Peer {
    let (local, remote) = (canonical(local), canonical(remote));
    if remote.ip().is_loopback() {
        match socket_uid(remote, local) {
            Ok(uid) => return Peer::Uid(uid),
            Err(e) => {
                if !WARNED.swap(true, Ordering::Relaxed) {
                    eprintln!(
                        "gpu-quota: cannot read the uid of a local client's socket ({e}); local \
                         clients share one connection budget (a sandbox without AF_NETLINK?)"
                    );
                }
                return Peer::Addr(remote.ip());
            }
        }
    }
    match remote.ip() {
        IpAddr::V6(v6) => {
            let s = v6.segments();
            Peer::Addr(IpAddr::V6(Ipv6Addr::new(
                s[0], s[1], s[2], s[3], 0, 0, 0, 0,
            )))
        }
        v4 => Peer::Addr(v4),
    }
}

// linux/inet_diag.h, linux/sock_diag.h, linux/netlink.h
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const INET_DIAG_NOCOOKIE: u32 = !0;

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct NlMsgHdr {
    len: u32,
    kind: u16,
    flags: u16,
    seq: u32,
    pid: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct SockId {
    /// Ports and addresses in network byte order.
    sport: [u8; 2],
    dport: [u8; 2],
    src: [u8; 16],
    dst: [u8; 16],
    iface: u32,
    cookie: [u32; 2],
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Request {
    hdr: NlMsgHdr,
    family: u8,
    protocol: u8,
    ext: u8,
    pad: u8,
    states: u32,
    id: SockId,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct DiagMsg {
    family: u8,
    state: u8,
    timer: u8,
    retrans: u8,
    id: SockId,
    expires: u32,
    rqueue: u32,
    wqueue: u32,
    uid: u32,
    inode: u32,
}

fn octets(ip: IpAddr) -> [u8; 16] {
    let mut o = [0u8; 16];
    match ip {
        IpAddr::V4(v4) => o[..4].copy_from_slice(&v4.octets()),
        IpAddr::V6(v6) => o = v6.octets(),
    }
    o
}

/// The uid owning the TCP socket bound to `sock` and connected to `peer`
/// (both on this host's loopback).
fn socket_uid(sock: SocketAddr, peer: SocketAddr) -> io::Result<u32> {
    let family = match sock.ip() {
        IpAddr::V4(_) => libc::AF_INET,
        IpAddr::V6(_) => libc::AF_INET6,
    };
    let req = Request {
        hdr: NlMsgHdr {
            len: size_of::<Request>() as u32,
            kind: SOCK_DIAG_BY_FAMILY,
            flags: NLM_F_REQUEST,
            seq: 1,
            pid: 0,
        },
        family: family as u8,
        protocol: libc::IPPROTO_TCP as u8,
        ext: 0,
        pad: 0,
        states: !0,
        id: SockId {
            sport: sock.port().to_be_bytes(),
            dport: peer.port().to_be_bytes(),
            src: octets(sock.ip()),
            dst: octets(peer.ip()),
            iface: 0,
            cookie: [INET_DIAG_NOCOOKIE; 2],
        },
    };
    // SAFETY: plain syscalls on a descriptor this function owns; the
    // buffers are sized by the structs they hold.
    unsafe {
        let fd = libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            libc::NETLINK_SOCK_DIAG,
        );
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let r = (|| {
            // the kernel answers at once; never let it hold the runtime
            let tv = libc::timeval {
                tv_sec: 0,
                tv_usec: 100_000,
            };
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                &tv as *const _ as *const libc::c_void,
                size_of::<libc::timeval>() as u32,
            );
            let sent = libc::send(
                fd,
                &req as *const Request as *const libc::c_void,
                size_of::<Request>(),
                0,
            );
            if sent < 0 {
                return Err(io::Error::last_os_error());
            }
            let mut buf = [0u8; 512];
            let n = libc::recv(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len(), 0);
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            let n = n as usize;
            if n < size_of::<NlMsgHdr>() {
                return Err(io::Error::other("short netlink answer"));
            }
            let hdr: NlMsgHdr = std::ptr::read_unaligned(buf.as_ptr() as *const NlMsgHdr);
            if hdr.kind == NLMSG_ERROR {
                let code = if n >= size_of::<NlMsgHdr>() + 4 {
                    std::ptr::read_unaligned(buf.as_ptr().add(size_of::<NlMsgHdr>()) as *const i32)
                } else {
                    -libc::EIO
                };
                return Err(io::Error::from_raw_os_error(-code));
            }
            if hdr.kind != SOCK_DIAG_BY_FAMILY || n < size_of::<NlMsgHdr>() + size_of::<DiagMsg>() {
                return Err(io::Error::other("unexpected netlink answer"));
            }
            let msg: DiagMsg =
                std::ptr::read_unaligned(buf.as_ptr().add(size_of::<NlMsgHdr>()) as *const DiagMsg);
            Ok(msg.uid)
        })();
        libc::close(fd);
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn a_loopback_client_is_its_sockets_uid() {
        for bind in ["127.0.0.1:0", "[::1]:0"] {
            let Ok(l) = TcpListener::bind(bind) else {
                continue; // no IPv6 here
            };
            let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
            let (s, remote) = l.accept().unwrap();
            assert_eq!(remote, c.local_addr().unwrap());
            let uid = unsafe { libc::geteuid() };
            assert_eq!(
                identify(s.local_addr().unwrap(), remote),
                Peer::Uid(uid),
                "{bind}"
            );
            // a four-tuple with no socket behind it is not anyone's
            let gone = SocketAddr::new(remote.ip(), 1);
            assert!(socket_uid(gone, s.local_addr().unwrap()).is_err());
        }
    }

    #[test]
    fn remote_peers_are_their_address_and_ipv6_its_64() {
        let local: SocketAddr = "10.0.0.1:9400".parse().unwrap();
        let a: SocketAddr = "10.0.0.7:40000".parse().unwrap();
        assert_eq!(identify(local, a), Peer::Addr(a.ip()));
        let local: SocketAddr = "[2001:db8::1]:9400".parse().unwrap();
        let b: SocketAddr = "[2001:db8:0:1:aaaa::5]:40000".parse().unwrap();
        let c: SocketAddr = "[2001:db8:0:1:bbbb::9]:40001".parse().unwrap();
        assert_eq!(identify(local, b), identify(local, c));
        assert_eq!(
            identify(local, b),
            Peer::Addr("2001:db8:0:1::".parse().unwrap())
        );
    }
}

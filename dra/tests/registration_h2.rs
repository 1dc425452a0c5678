//! The kubelet's registration dial, byte for byte: grpc-go sends the socket
//! path as the HTTP/2 `:authority`, which the driver's registration socket
//! must answer (src/h2authority.rs). Raw HTTP/2 frames over the unix socket.
#![allow(unused_imports)]
use gpuquota_dra::api::dra::{self, dra_plugin_client::DraPluginClient};
use gpuquota_dra::api::health::{
    self, dra_resource_health_client::DraResourceHealthClient, HealthStatus,
};
use gpuquota_dra::api::registration::{self, registration_client::RegistrationClient};
use gpuquota_dra::node::{HostNode, Node};
use gpuquota_dra::publish::{SliceStore, StoreError};
use gpuquota_dra::source::MemoryClaims;
use gpuquota_dra::{daemon, slice};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tonic::transport::{Channel, Endpoint, Uri};

mod common;
use common::*;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let n = payload.len() as u32;
    let mut f = vec![(n >> 16) as u8, (n >> 8) as u8, n as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// HPACK literal with incremental indexing, indexed name, raw value.
fn lit_indexed(name_index: u8, value: &str) -> Vec<u8> {
    assert!(name_index < 64 && value.len() < 127);
    let mut v = vec![0x40 | name_index, value.len() as u8];
    v.extend_from_slice(value.as_bytes());
    v
}

/// The first GetInfo's header block, as grpc-go encodes it (2 = :method
/// POST, 6 = :scheme http; then :path, :authority, content-type,
/// user-agent, te entered into the dynamic table).
fn grpc_go_first_block(authority: &str) -> Vec<u8> {
    let mut b = vec![0x83, 0x86];
    b.extend(lit_indexed(4, "/pluginregistration.Registration/GetInfo"));
    b.extend(lit_indexed(1, authority));
    b.extend(lit_indexed(31, "application/grpc"));
    b.extend(lit_indexed(58, "grpc-go/1.72.1"));
    // te: no static entry with that name: literal name
    b.extend_from_slice(&[0x40, 2, b't', b'e', 8]);
    b.extend_from_slice(b"trailers");
    b
}

/// The same request again on the connection: every field from the tables
/// (:path 66, :authority 65, content-type 64, user-agent 63, te 62).
const GRPC_GO_SECOND_BLOCK: &[u8] = &[0x83, 0x86, 0xc2, 0xc1, 0xc0, 0xbf, 0xbe];

#[derive(Debug, PartialEq)]
enum Reply {
    /// :status, the gRPC message, grpc-status
    Ok(String, Vec<u8>, String),
    /// RST_STREAM / GOAWAY error code
    Reset(u32),
    GoAway(u32),
}

async fn read_frame(s: &mut tokio::net::UnixStream) -> (u8, u8, u32, Vec<u8>) {
    use tokio::io::AsyncReadExt;
    let mut h = [0u8; 9];
    tokio::time::timeout(Duration::from_secs(10), s.read_exact(&mut h))
        .await
        .expect("a frame within 10 s")
        .expect("the connection stays open");
    let n = (h[0] as usize) << 16 | (h[1] as usize) << 8 | h[2] as usize;
    let mut p = vec![0; n];
    s.read_exact(&mut p).await.unwrap();
    let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
    (h[3], h[4], stream, p)
}

/// Send one GetInfo on `stream` with `block` and read its reply.
async fn kubelet_get_info(
    s: &mut tokio::net::UnixStream,
    dec: &mut loona_hpack::Decoder<'static>,
    stream: u32,
    block: &[u8],
) -> Reply {
    use tokio::io::AsyncWriteExt;
    let headers = h2_frame(1, 0x4, stream, block);
    // split mid-frame, as a socket may deliver it
    let (a, b) = headers.split_at(headers.len() / 2);
    s.write_all(a).await.unwrap();
    s.flush().await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    s.write_all(b).await.unwrap();
    // an empty InfoRequest: uncompressed, length 0
    s.write_all(&h2_frame(0, 0x1, stream, &[0, 0, 0, 0, 0]))
        .await
        .unwrap();
    let (mut status, mut body, mut grpc) = (String::new(), Vec::new(), String::new());
    loop {
        let (kind, flags, sid, p) = read_frame(s).await;
        match kind {
            // SETTINGS: acknowledge the server's
            4 if flags & 1 == 0 => s.write_all(&h2_frame(4, 1, 0, &[])).await.unwrap(),
            7 => return Reply::GoAway(u32::from_be_bytes(p[4..8].try_into().unwrap())),
            3 if sid == stream => {
                return Reply::Reset(u32::from_be_bytes(p[..4].try_into().unwrap()))
            }
            1 if sid == stream => {
                assert!(flags & 0x4 != 0, "the server's headers in one frame");
                dec.decode_with_cb(&p, |n, v| {
                    let (n, v) = (String::from_utf8_lossy(&n), String::from_utf8_lossy(&v));
                    match &*n {
                        ":status" => status = v.into_owned(),
                        "grpc-status" => grpc = v.into_owned(),
                        _ => {}
                    }
                })
                .unwrap();
                if flags & 0x1 != 0 {
                    return Reply::Ok(status, body, grpc);
                }
            }
            0 if sid == stream => body.extend_from_slice(&p),
            _ => {}
        }
    }
}

async fn kubelet_connection(path: &Path) -> tokio::net::UnixStream {
    use tokio::io::AsyncWriteExt;
    let mut s = tokio::net::UnixStream::connect(path).await.unwrap();
    s.write_all(PREFACE).await.unwrap();
    s.write_all(&h2_frame(4, 0, 0, &[])).await.unwrap();
    s
}

fn plugin_info(body: &[u8]) -> registration::PluginInfo {
    use prost::Message;
    assert!(
        body.len() >= 5 && body[0] == 0,
        "one uncompressed gRPC message"
    );
    let n = u32::from_be_bytes(body[1..5].try_into().unwrap()) as usize;
    assert_eq!(body.len(), 5 + n);
    registration::PluginInfo::decode(&body[5..]).unwrap()
}

#[tokio::test]
async fn the_kubelets_registration_dial_with_the_socket_path_as_authority_is_answered() {
    let h = Host::start().await;
    let authority = h.reg_sock().display().to_string();
    let mut s = kubelet_connection(&h.reg_sock()).await;
    let mut dec = loona_hpack::Decoder::new();
    for (stream, block) in [
        (1, grpc_go_first_block(&authority)),
        (3, GRPC_GO_SECOND_BLOCK.to_vec()),
    ] {
        match kubelet_get_info(&mut s, &mut dec, stream, &block).await {
            Reply::Ok(status, body, grpc) => {
                assert_eq!((&*status, &*grpc), ("200", "0"), "stream {stream}");
                let info = plugin_info(&body);
                assert_eq!(info.r#type, "DRAPlugin");
                assert_eq!(info.name, "vram.gpu-quota.io");
                assert_eq!(info.endpoint, h.dra_sock().display().to_string());
            }
            r => panic!("stream {stream} (:authority {authority}): {r:?} (1 = PROTOCOL_ERROR)"),
        }
    }
    drop(s);

    // a header block over the adapter's 64 KiB bound: the connection is
    // closed on the frame header (h2 alone would wait for the payload)
    let mut s = kubelet_connection(&h.reg_sock()).await;
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut head = h2_frame(1, 0x4, 1, &[]);
        head[..3].copy_from_slice(&((64u32 << 10) + 1).to_be_bytes()[1..]);
        s.write_all(&head).await.unwrap();
        let mut sink = [0u8; 4096];
        let closed = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                match s.read(&mut sink).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        })
        .await;
        assert!(
            closed.is_ok(),
            "an oversize header block closes the connection"
        );
    }
    drop(s);

    // negative control: the same bytes on the DRA socket, which is served
    // without the adapter (the kubelet dials it as unix:<path>), are what
    // h2 refuses; so the client above reproduces the kubelet's failure
    let mut s = kubelet_connection(&h.dra_sock()).await;
    let mut dec = loona_hpack::Decoder::new();
    let dra_path = h.dra_sock().display().to_string();
    assert_eq!(
        kubelet_get_info(&mut s, &mut dec, 1, &grpc_go_first_block(&dra_path)).await,
        Reply::Reset(1),
        "h2 refuses a path as :authority with PROTOCOL_ERROR"
    );
    drop(s);
    h.stop().await;
}

//! `gpu-quota metrics --listen ADDR`: the exposition over HTTP for
//! Prometheus. `GET /metrics` renders a fresh snapshot per scrape,
//! `GET /healthz` answers `ok`; anything else is 404 (405 for other
//! methods). Binds exactly the address given; one request at a time
//! (every scrape reads a few small files).
use crate::{metrics, snapshot};
use anyhow::{anyhow, Result};
use gpuquota_core::config::Config;
use std::net::SocketAddr;
use tiny_http::{Header, Method, Response, Server};

pub fn serve(cfg: &Config, addr: SocketAddr) -> Result<()> {
    let server = Server::http(addr).map_err(|e| anyhow!("cannot listen on {addr}: {e}"))?;
    let nvml = snapshot::Nvml::init();
    eprintln!(
        "gpu-quota: serving metrics on http://{}/metrics",
        server.server_addr()
    );
    for req in server.incoming_requests() {
        let path = req.url().split('?').next().unwrap_or("").to_string();
        let resp = match (req.method(), path.as_str()) {
            (Method::Get | Method::Head, "/metrics") => {
                let body = metrics::render(&snapshot::take(cfg, &nvml));
                text(200, body, metrics::CONTENT_TYPE)
            }
            (Method::Get | Method::Head, "/healthz") => {
                text(200, "ok\n".into(), "text/plain; charset=utf-8")
            }
            (Method::Get | Method::Head, "/") => text(
                200,
                "gpu-quota exporter: see /metrics and /healthz\n".into(),
                "text/plain; charset=utf-8",
            ),
            (Method::Get | Method::Head, _) => {
                text(404, "not found\n".into(), "text/plain; charset=utf-8")
            }
            _ => text(
                405,
                "method not allowed\n".into(),
                "text/plain; charset=utf-8",
            ),
        };
        let _ = req.respond(resp);
    }
    Ok(())
}

fn text(code: u16, body: String, ctype: &str) -> Response<std::io::Cursor<Vec<u8>>> {
    Response::from_string(body)
        .with_status_code(code)
        .with_header(Header::from_bytes(&b"Content-Type"[..], ctype.as_bytes()).expect("header"))
}

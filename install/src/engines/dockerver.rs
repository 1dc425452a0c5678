//! Which Docker Engine is on the host: `--docker-version`, else the daemon's own answer on
//! its API socket (`$DOCKER_HOST` when it is `unix://…`, else /var/run/docker.sock), else
//! `dockerd --version`. Docker < 24 (API < 1.43) cannot pass `--annotation`, which decides
//! `env_requests` (module `gqconfig`).
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// First release whose `docker run --annotation` reaches config.json (API 1.43).
pub const ANNOTATIONS_SINCE: u32 = 24;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DockerVersion {
    pub major: u32,
    pub minor: u32,
    /// As reported, e.g. "20.10.24+dfsg1".
    pub text: String,
    /// Where it came from, e.g. "daemon at /var/run/docker.sock".
    pub source: String,
}

impl DockerVersion {
    pub fn passes_annotations(&self) -> bool {
        self.major >= ANNOTATIONS_SINCE
    }
}

/// "26.1.5+dfsg1" / "20.10.24" / "24.0" -> (major, minor).
pub fn parse(s: &str) -> Option<(u32, u32)> {
    let s = s.trim().trim_start_matches('v');
    let mut it = s.split(|c: char| !c.is_ascii_digit());
    let major = it.next()?.parse().ok()?;
    let minor = it.next().and_then(|m| m.parse().ok()).unwrap_or(0);
    Some((major, minor))
}

/// `Docker version 20.10.24+dfsg1, build 5d6db84` -> "20.10.24+dfsg1".
pub fn parse_dockerd_output(out: &str) -> Option<String> {
    let rest = out.trim().strip_prefix("Docker version ")?;
    let v = rest.split([',', ' ']).next()?;
    parse(v).map(|_| v.to_string())
}

/// The body of an HTTP response (after the blank line), if the status is 200.
fn http_body(resp: &[u8]) -> Option<&[u8]> {
    let head_end = resp.windows(4).position(|w| w == b"\r\n\r\n")?;
    let status = std::str::from_utf8(&resp[..head_end])
        .ok()?
        .lines()
        .next()?;
    status
        .split(' ')
        .nth(1)
        .filter(|c| *c == "200")
        .map(|_| &resp[head_end + 4..])
}

/// `GET /version` on the daemon's unix socket; the "Version" field.
pub fn from_api(sock: &Path) -> std::io::Result<String> {
    let mut s = UnixStream::connect(sock)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.set_write_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(b"GET /version HTTP/1.0\r\nHost: docker\r\n\r\n")?;
    let mut resp = Vec::new();
    s.take(1 << 20).read_to_end(&mut resp)?;
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    let body = http_body(&resp).ok_or_else(|| bad("not an HTTP 200 answer"))?;
    let v: serde_json::Value =
        serde_json::from_slice(body).map_err(|_| bad("the answer is not JSON"))?;
    v.get("Version")
        .and_then(|v| v.as_str())
        .map(String::from)
        .ok_or_else(|| bad("no Version in the answer"))
}

/// The daemon socket the docker CLI would use.
pub fn api_socket() -> PathBuf {
    match std::env::var("DOCKER_HOST") {
        Ok(h) if h.starts_with("unix://") => PathBuf::from(&h["unix://".len()..]),
        _ => PathBuf::from("/var/run/docker.sock"),
    }
}

fn version(text: &str, source: String) -> Option<DockerVersion> {
    let (major, minor) = parse(text)?;
    Some(DockerVersion {
        major,
        minor,
        text: text.to_string(),
        source,
    })
}

/// The host's Docker version, or None when neither the daemon nor `dockerd` answers.
pub fn detect(explicit: Option<&str>) -> Option<DockerVersion> {
    if let Some(v) = explicit {
        return version(v, "--docker-version".into());
    }
    let sock = api_socket();
    if let Ok(v) = from_api(&sock) {
        if let Some(d) = version(&v, format!("daemon at {}", sock.display())) {
            return Some(d);
        }
    }
    let out = std::process::Command::new("dockerd")
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let text = parse_dockerd_output(&String::from_utf8_lossy(&out.stdout))?;
    version(&text, "`dockerd --version`".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_versions() {
        assert_eq!(parse("20.10.24+dfsg1"), Some((20, 10)));
        assert_eq!(parse("26.1.5+dfsg1"), Some((26, 1)));
        assert_eq!(parse("24"), Some((24, 0)));
        assert_eq!(parse("v28.2.2"), Some((28, 2)));
        assert_eq!(parse("dev"), None);
        assert_eq!(
            parse_dockerd_output("Docker version 20.10.24+dfsg1, build 5d6db84\n").as_deref(),
            Some("20.10.24+dfsg1")
        );
        assert_eq!(parse_dockerd_output("something else"), None);
        let v = |t| version(t, String::new()).unwrap().passes_annotations();
        assert!(!v("20.10.24") && !v("23.0.6") && v("24.0.0") && v("26.1.5"));
    }

    #[test]
    fn http_answers() {
        assert_eq!(
            http_body(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{\"Version\":\"26.1.5\"}"),
            Some(&b"{\"Version\":\"26.1.5\"}"[..])
        );
        assert_eq!(http_body(b"HTTP/1.0 404 Not Found\r\n\r\n{}"), None);
        assert_eq!(http_body(b"garbage"), None);
    }

    #[test]
    fn asks_the_daemon_on_its_socket() {
        // a one-shot fake daemon answering GET /version
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("d.sock");
        let l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let t = std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            let mut buf = [0u8; 512];
            let n = c.read(&mut buf).unwrap();
            assert!(buf[..n].starts_with(b"GET /version HTTP/1.0\r\n"));
            c.write_all(
                b"HTTP/1.0 200 OK\r\n\r\n{\"ApiVersion\":\"1.45\",\"Version\":\"26.1.5+dfsg1\"}",
            )
            .unwrap();
        });
        assert_eq!(from_api(&sock).unwrap(), "26.1.5+dfsg1");
        t.join().unwrap();
        assert!(from_api(&dir.path().join("none.sock")).is_err());
    }
}

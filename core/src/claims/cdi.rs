//! A prepared claim's CDI spec and its token: the one variable that binds a
//! container to the claim.
use super::{ClaimError, TOKEN_BYTES};
use crate::{config::Config, fsutil};
use gpuquota_formats::keys;
use std::path::PathBuf;

/// The variable that binds a container to claim `uid`.
pub fn env_var(uid: &str) -> String {
    format!("{}{}", keys::ENV_CLAIM_PREFIX, uid.replace('-', "_"))
}

/// The claim's CDI device, fully qualified.
pub fn cdi_device_id(uid: &str) -> String {
    format!("{}={uid}", keys::DRA_CDI_KIND)
}

/// The claim's CDI spec file.
pub fn cdi_path(cfg: &Config, uid: &str) -> PathBuf {
    cfg.cdi_dir
        .join(format!("{}-claim-{uid}.json", keys::DRA_DRIVER))
}

/// The CDI spec of a prepared claim: one device, one variable.
pub fn cdi_spec(uid: &str, token: &str) -> Vec<u8> {
    let v = serde_json::json!({
        "cdiVersion": "0.6.0",
        "kind": keys::DRA_CDI_KIND,
        "devices": [{
            "name": uid,
            "containerEdits": {"env": [format!("{}={token}", env_var(uid))]}
        }]
    });
    let mut out = serde_json::to_vec_pretty(&v).expect("a Value serializes");
    out.push(b'\n');
    out
}

/// 256 random bits from the kernel (getrandom, else /dev/urandom), hex.
pub(super) fn new_token() -> std::io::Result<String> {
    let mut buf = [0u8; TOKEN_BYTES];
    let mut filled = 0;
    while filled < buf.len() {
        // SAFETY: the pointer and length describe the unfilled rest of buf.
        let n =
            unsafe { libc::getrandom(buf[filled..].as_mut_ptr().cast(), buf.len() - filled, 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::ENOSYS) => {
                    use std::io::Read;
                    std::fs::File::open("/dev/urandom")?.read_exact(&mut buf[filled..])?;
                    break;
                }
                _ => return Err(e),
            }
        }
        filled += n as usize;
    }
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// Write the claim's CDI spec: the directory made 0755 when missing (and
/// checked as every host directory of gpu-quota), the file replaced
/// atomically, 0600.
pub(super) fn write_cdi(cfg: &Config, uid: &str, token: &str) -> Result<(), ClaimError> {
    fsutil::secure_dir(&cfg.cdi_dir, 0o755).map_err(|e| ClaimError::Io(cfg.cdi_dir.clone(), e))?;
    let p = cdi_path(cfg, uid);
    fsutil::write_atomic(&p, &cdi_spec(uid, token), 0o600).map_err(|e| ClaimError::Io(p, e))
}

pub(super) fn remove_cdi(cfg: &Config, uid: &str) -> Result<(), ClaimError> {
    let p = cdi_path(cfg, uid);
    match std::fs::remove_file(&p) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(ClaimError::Io(p, e)),
        _ => Ok(()),
    }
}

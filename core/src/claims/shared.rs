//! The usage file a DRA claim's consumers share (`state::claim_dir`):
//! made under the ledger's lock at a consumer's setup, a consumer's
//! processes freed in it when that consumer ends, gone with the last
//! consumer, swept by `gc` when a crash left it behind.
use super::{valid_uid, ClaimError};
use crate::{config::Config, ledger::Ledger, ledger::Reservation, state};
use std::path::PathBuf;

/// Make the shared usage file of the claim `r` is bound to, unless it is
/// there, under the ledger's lock (the runtime's setup, before the
/// container's state directory binds it).
pub fn shared_usage(
    cfg: &Config,
    r: &Reservation,
    backing: state::UsageBacking,
) -> Result<(), ClaimError> {
    let Some(uid) = r.bound_claim.as_deref() else {
        return Ok(());
    };
    let dir = state::claim_dir(cfg, uid);
    Ledger::new(cfg)
        .transact(|_| Ok((state::ensure_claim_usage(cfg, uid, backing), false)))?
        .map(|_| ())
        .map_err(|e| ClaimError::Io(dir, e))
}

/// A container bound to a claim ended (`r`, out of the ledger): its
/// processes' usage is freed in the claim's shared usage file (the other
/// consumers cannot judge them: another pid namespace), and the file goes
/// with the claim's last consumer, under the ledger's lock.
pub fn consumer_gone(cfg: &Config, r: &Reservation) {
    let Some(uid) = r.bound_claim.as_deref() else {
        return;
    };
    if !valid_uid(uid) {
        return; // a hand-edited ledger: no path is made of it
    }
    let dir = state::claim_dir(cfg, uid);
    let _ = crate::usage::free_group(&state::usage_path(&dir), state::consumer_group(r));
    let _ = Ledger::new(cfg).transact(|d| {
        if !d
            .reservations
            .iter()
            .any(|x| x.bound_claim.as_deref() == Some(uid))
        {
            let _ = state::remove(&dir);
        }
        Ok(((), false))
    });
}

/// `gc`'s sweep of the claims' shared usage files: under the ledger's
/// lock (a consumer binding meanwhile makes one), remove every
/// `<state_dir>/claims/<uid>` no reservation in the ledger is bound to
/// (left by a crash). Returns what was removed.
pub fn sweep_shared(cfg: &Config) -> Result<Vec<PathBuf>, ClaimError> {
    let root = cfg.state_dir.join("claims");
    if !root.is_dir() {
        return Ok(vec![]);
    }
    Ledger::new(cfg)
        .transact(|d| {
            let mut gone = vec![];
            for e in std::fs::read_dir(&root).into_iter().flatten().flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if !d
                    .reservations
                    .iter()
                    .any(|r| r.bound_claim.as_deref() == Some(name.as_str()))
                {
                    let p = e.path();
                    if state::remove(&p).is_ok() {
                        gone.push(p);
                    }
                }
            }
            Ok((gone, false))
        })
        .map_err(ClaimError::from)
}

//! The runtime's binding of a container to the claim whose variable it
//! presents.
use super::{env_var, label, ClaimError, MAX_UID, TOKEN_BYTES};
use crate::config::Config;
use crate::fsutil;
use crate::ledger::{Key, Ledger, LedgerError, Reservation};
use crate::placement::Placer;
use gpuquota_formats::keys;
use serde_json::Value;

/// Equal without an early exit (the time taken does not say how much of a
/// guess was right).
fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The claim variable a container's config.json presents.
#[derive(Clone, PartialEq, Eq)]
pub struct Presented {
    /// The variable's name (`GPU_QUOTA_CLAIM_<uid, - as _>`).
    pub var: String,
    token: String,
}

impl std::fmt::Debug for Presented {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Presented")
            .field("var", &self.var)
            .finish_non_exhaustive()
    }
}

/// The claim variable in the OCI `process.env` of `config`, if any. Two
/// different ones (names or values) are refused. Linear in the
/// environment; names and values are capped.
pub fn presented(config: &Value) -> Result<Option<Presented>, ClaimError> {
    let Some(env) = config.pointer("/process/env").and_then(Value::as_array) else {
        return Ok(None);
    };
    let mut found: Option<Presented> = None;
    for v in env.iter().filter_map(Value::as_str) {
        if !v.starts_with(keys::ENV_CLAIM_PREFIX) {
            continue;
        }
        let (var, token) = v.split_once('=').unwrap_or((v, ""));
        let var: String = var
            .chars()
            .take(keys::ENV_CLAIM_PREFIX.len() + MAX_UID)
            .collect();
        let p = Presented {
            var,
            token: token.chars().take(4 * TOKEN_BYTES).collect(),
        };
        match &found {
            None => found = Some(p),
            Some(f) if *f == p => {}
            Some(f) => {
                return Err(ClaimError::TwoClaims {
                    first: f.var.clone(),
                    second: p.var,
                })
            }
        }
    }
    Ok(found)
}

/// Bind container `id` (runc root `root`, `bundle`) to the claim it
/// presents: under the ledger's lock, the token is compared in constant
/// time with the claim entry's. Containers already bound to the claim stay
/// bound (they share it); dead ones are reclaimed on the way (appended to
/// `reclaimed`, for the caller's release). The container's entry gets the
/// claim's slice and the claim's uid.
///
/// A claim with a compute share binds a container only as admission
/// admits a container's share: `user` is the host user its process runs
/// as (`spec::share_uid`), known and not root unless the operator allows
/// root's shares; the container's slice records it, so its process is kept
/// from becoming root and a root process in it is refused at `cuInit`. The
/// claim's containers may run as different users (the daemons serve every
/// uid at once).
pub fn bind(
    cfg: &Config,
    p: &Presented,
    id: &str,
    root: &str,
    bundle: &str,
    user: Option<u32>,
    reclaimed: &mut Vec<Reservation>,
) -> Result<Reservation, ClaimError> {
    let ledger = Ledger::new(cfg);
    let key = Key::Root {
        id,
        root: Some(root),
    };
    ledger.transact(|d| {
        let now = fsutil::now_unix();
        // any live one of this key (the partition below drops every match)
        if let Some(r) = d
            .reservations
            .iter()
            .find(|r| key.matches(r) && !ledger.is_stale(r, now))
        {
            return Err(LedgerError::Duplicate {
                id: id.into(),
                slices: crate::ledger::describe_slices(&r.slices),
            });
        }
        let Some(entry) = d
            .reservations
            .iter()
            .find(|r| r.claim.as_ref().is_some_and(|c| env_var(&c.uid) == p.var))
            .cloned()
        else {
            return Ok((Err(ClaimError::UnknownClaim { var: p.var.clone() }), false));
        };
        let c = entry.claim.as_ref().expect("found by its claim");
        if !ct_eq(c.token.as_bytes(), p.token.as_bytes()) {
            return Ok((
                Err(ClaimError::WrongToken {
                    var: p.var.clone(),
                    claim: label(c),
                }),
                false,
            ));
        }
        let mut slices = entry.slices.clone();
        if let Some(share) = slices.iter_mut().find(|s| s.sm_percent > 0) {
            let refused = Placer::share_user_refusal(user, cfg.mps_root_shares, || {
                format!("container {id} of claim {}", label(c))
            });
            if let Some(err) = refused {
                return Ok((
                    Err(ClaimError::Refused {
                        err: Box::new(err),
                        holders: None,
                        waited_ms: 0,
                    }),
                    false,
                ));
            }
            share.sm_user = user;
        }
        let dead_holder = |r: &Reservation| {
            r.bound_claim.as_deref() == Some(&c.uid) && !key.matches(r) && ledger.is_stale(r, now)
        };
        // dead holders of the claim and a dead entry of this container's key
        let (gone, keep): (Vec<_>, Vec<_>) = d
            .reservations
            .drain(..)
            .partition(|r| dead_holder(r) || key.matches(r));
        d.reservations = keep;
        reclaimed.extend(gone);
        let r = Reservation {
            created_unix: now,
            bound_claim: Some(c.uid.clone()),
            ..Reservation::new(
                id,
                Some(root),
                bundle,
                slices,
                format!("claim {}/{}", c.namespace, c.name),
            )
            .admitted_now()
        };
        d.reservations.push(r.clone());
        Ok((Ok(r), true))
    })?
}

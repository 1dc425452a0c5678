//! Test helper (never installed): prepares and unprepares a DRA claim on
//! this host through `core::claims`, as the DRA driver does on the
//! kubelet's NodePrepareResources / NodeUnprepareResources, for tests that
//! have no API server (tests/e2e/claims.rs, tests/engines/dra.sh). The
//! config is `$GPU_QUOTA_CONFIG` (else the default path).
//!
//! usage: gq-claim prepare UID NAMESPACE NAME GPU_UUID BYTES [SM_PERCENT [SM_PROCS]]
//!        gq-claim unprepare UID
//!        gq-claim offers
//! `prepare` prints the CDI device ids, one a line; errors go to stderr
//! with exit status 1 (`unprepare` of a claim in use: status 3).
use gpuquota_core::claims::{self, ClaimAlloc, ClaimError};
use gpuquota_core::Config;

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let cfg = match Config::load_default() {
        Ok(c) => c,
        Err(e) => fail(&e.to_string(), 1),
    };
    match a.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["prepare", uid, namespace, name, gpu, bytes, ref share @ ..] if share.len() <= 2 => {
            let num = |s: &str, what| s.parse().unwrap_or_else(|_| fail(what, 2));
            let bytes = num(bytes, "BYTES: a number");
            let sm = share.first().map(|p| num(p, "SM_PERCENT: a number") as u32);
            let alloc = ClaimAlloc {
                uid: uid.into(),
                namespace: namespace.into(),
                name: name.into(),
                gpu_uuid: gpu.into(),
                bytes,
                sm,
                sm_procs: match share.get(1) {
                    Some(n) => num(n, "SM_PROCS: a number") as u32,
                    None => u32::from(sm.is_some()),
                },
                burst: None,
            };
            match claims::prepare(&cfg, &alloc) {
                Ok(p) => p.cdi_device_ids.iter().for_each(|d| println!("{d}")),
                Err(e) => fail(&e.to_string(), 1),
            }
        }
        ["unprepare", uid] => match claims::unprepare(&cfg, uid) {
            Ok(()) => {}
            Err(e @ ClaimError::InUse { .. }) => fail(&e.to_string(), 3),
            Err(e) => fail(&e.to_string(), 1),
        },
        ["offers"] => {
            match claims::offers(&cfg, &gpuquota_core::ctxcost::known_costs(&cfg, true)) {
                Ok(o) => o
                    .iter()
                    .for_each(|o| {
                        println!(
                            "{} {} {} {} {}",
                            o.index, o.uuid, o.offer_bytes, o.share_bytes, o.share_percent
                        )
                    }),
                Err(e) => fail(&e.to_string(), 1),
            }
        }
        _ => fail(
            "usage: gq-claim prepare UID NAMESPACE NAME GPU_UUID BYTES [SM_PERCENT [SM_PROCS]] | unprepare UID | offers",
            2,
        ),
    }
}

fn fail(msg: &str, code: i32) -> ! {
    eprintln!("gpu-quota: {msg}");
    std::process::exit(code)
}

//! One decision: a claim's prepare is refused by the same placer, with the
//! same message, as a container's start.
use super::*;

/// Container `id` asking for `bytes` on GPU 0 (without a share): the
/// refusal's message, without the "cannot start container" prefix.
fn container_refusal(cfg: &Config, id: &str, bytes: u64) -> String {
    let inv = Inventory::load(cfg).unwrap();
    let req = Request {
        user: Some(1000),
        ..Request::slice_for_test(bytes, 0)
    };
    match Ledger::new(cfg).admit(cfg, &inv, &req, id, Some("/run/runc"), "/b", &mut vec![]) {
        Err(LedgerError::Refused { err, .. }) => err.to_string(),
        other => panic!("container {id} was not refused: {other:?}"),
    }
}

/// `m` with who asked (the claim or the container's annotation) left out.
fn apart_from(m: &str, origin: &str) -> String {
    assert!(m.contains(origin), "{origin:?} not in: {m}");
    m.replace(origin, "<who>")
}

/// A claim and a container refused for the same reason get the same
/// message — what was asked, what is free, what to do — apart from who
/// asked: 12 GiB where 10 GiB are free, and a slice without a share on a
/// GPU that serves compute shares. (The claim's refusal may add what a
/// claim knows more: who holds the GPU, how long it waited.)
#[test]
fn a_claim_and_a_container_refused_for_the_same_reason_get_the_same_message() {
    let (_d, cfg) = setup();
    container(&cfg, "docker1", 0, 6 * G);
    let claim = prepare(&cfg, &alloc("u-1", GPU0, 12 * G))
        .unwrap_err()
        .to_string();
    let claim = apart_from(&claim, "claim default/c-u-1");
    let started = apart_from(&container_refusal(&cfg, "c2", 12 * G), "annotation vram");
    assert!(
        claim.starts_with(&started),
        "does not fit:\n claim:     {claim}\n container: {started}"
    );

    let (_d, cfg) = setup();
    share(&cfg, "s");
    let claim = prepare(&cfg, &alloc("u-2", GPU0, 4 * G))
        .unwrap_err()
        .to_string();
    let claim = apart_from(&claim, "claim default/c-u-2");
    let started = apart_from(&container_refusal(&cfg, "c3", 4 * G), "annotation vram");
    assert_eq!(claim, started, "beside compute shares");
}

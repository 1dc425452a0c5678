//! A DRA claim with a compute share, on real runc with the fake MPS control
//! daemon: every container presenting the claim is an MPS client at the
//! claim's share (its variables, the view of its GPU's pipe directory) and
//! is bound only if its process cannot become host root; together they
//! hold the claim's share, as a container's processes hold a container's.
use gpu_quota_e2e::mps::{answers, delete, extra, mps_dir, wait_for, Daemons};
use gpu_quota_e2e::*;

const UID: &str = "5d3c2b1a-0f9e-4d8c-b7a6-95e4d3c2b1a0";
const PROBE: &str = "env > /out/env; ls /run/gpu-quota/mps > /out/mps; touch /out/done; sleep 600";

#[test]
fn a_share_claims_containers_are_clients_at_its_share() {
    require_e2e!();
    let h = Host::new(HostOpts {
        extra_config: extra(),
        ..HostOpts::default()
    });
    let _d = Daemons(&h);
    // 2 GiB and 25 % of GPU 0, split over 2 CUDA processes
    let o = h.claim(&[
        "prepare",
        UID,
        "default",
        "serve",
        &uuid(0),
        &(2 * GIB).to_string(),
        "25",
        "2",
    ]);
    assert_ok(&o, "gq-claim prepare");
    let var = h.cdi_env(UID);
    // root presenting it: refused, nothing bound
    let r = h.bundle("croot");
    r.set(&[], PROBE, &[&var]);
    let o = h.runtime(&["run", "-d", "--bundle", &r.bundle_arg(), "croot"]);
    assert!(!o.status.success(), "root on a compute claim");
    assert!(stderr(&o).contains("host root"), "{}", stderr(&o));
    assert!(
        h.reservations()
            .iter()
            .all(|r| r.get("bound_claim").is_none()),
        "nothing bound"
    );
    // two non-root consumers: both clients at the claim's share
    for (id, user) in [("c1000", 1000), ("c1001", 1001)] {
        let b = h.bundle(id);
        b.set(&[], PROBE, &[&var]).run_as(user);
        assert_ok(
            &h.runtime(&["run", "-d", "--bundle", &b.bundle_arg(), id]),
            id,
        );
        b.wait_out("done", 20).expect("the container ran its probe");
        let env = std::fs::read_to_string(b.out.join("env")).unwrap();
        for want in [
            "CUDA_MPS_PIPE_DIRECTORY=/run/gpu-quota/mps",
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=12.5",
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=2048M",
        ] {
            assert!(env.contains(want), "{id}: {want} not in {env}");
        }
        let mps = std::fs::read_to_string(b.out.join("mps")).unwrap();
        assert!(mps.lines().any(|l| l == "control"), "{id}: {mps}");
        let bound = h
            .reservations()
            .into_iter()
            .find(|r| r["container_id"] == id)
            .unwrap();
        assert_eq!(bound["bound_claim"], UID);
        assert_eq!(bound["slices"][0]["sm"], 25, "{bound}");
        assert_eq!(bound["slices"][0]["sm_procs"], 2, "{bound}");
        assert_eq!(bound["slices"][0]["sm_user"], user, "{bound}");
    }
    for id in ["c1000", "c1001"] {
        delete(&h, id);
    }
    // the claim still holds its share: the daemon stays for its next
    // container; its unprepare ends the GPU's last share, and the daemon
    let dir = mps_dir(&h, &uuid(0));
    assert!(
        answers(&dir),
        "the claim's GPU's daemon while the claim is held"
    );
    assert_ok(&h.claim(&["unprepare", UID]), "unprepare");
    assert!(h.reservations().is_empty());
    assert!(
        wait_for(5, || !dir.exists()),
        "the daemon is stopped at the last share's unprepare"
    );
}

//! Issue 20, the node side of the DRA driver, against real runc: a claim
//! prepared through `core::claims` (the test-only `gq-claim`, as the
//! driver does on NodePrepareResources) and a container whose process.env
//! carries what the claim's CDI device injects. Each security case keeps
//! its negative control (the right token binds; plain runc passes the
//! variable through), so a refusal is the runtime's doing.
use gpu_quota_e2e::*;
use serde_json::Value;

const UID: &str = "0a1b2c3d-0000-4000-8000-00000000c1a1";
const PROBE: &str = "ls /dev > /out/dev; cat /run/gpu-quota/limits > /out/limits; env > /out/env; touch /out/done; sleep 600";

fn ok_claim(h: &Host, uid: &str, name: &str, gpu: u32, bytes: u64) {
    let o = h.prepare_claim(uid, name, gpu, bytes);
    assert_ok(&o, "gq-claim prepare");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        format!("vram.gpu-quota.io/claim={uid}\n")
    );
}

fn claim_entries(h: &Host) -> Vec<Value> {
    h.reservations()
        .into_iter()
        .filter(|r| r.get("claim").is_some())
        .collect()
}

fn containers(h: &Host) -> Vec<Value> {
    h.reservations()
        .into_iter()
        .filter(|r| r.get("claim").is_none())
        .collect()
}

fn state_dirs(h: &Host) -> Vec<String> {
    std::fs::read_dir(h.path().join("state/containers"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn ls(h: &Host, args: &[&str]) -> String {
    let mut c = std::process::Command::new(bin("gpu-quota"));
    c.env("GPU_QUOTA_CONFIG", h.config()).arg("ls").args(args);
    let o = capture(c);
    assert_ok(&o, "gpu-quota ls");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn a_prepared_claim_gives_its_container_exactly_its_slice() {
    require_e2e!();
    let h = Host::new(HostOpts::default());
    ok_claim(&h, UID, "vram-8g", 1, 8 * GIB);
    let var = h.cdi_env(UID);
    let token = var.split_once('=').unwrap().1.to_string();
    assert!(var.starts_with("GPU_QUOTA_CLAIM_0a1b2c3d_0000_4000_8000_00000000c1a1="));
    // negative control: plain runc passes the variable through to the process
    let p = h.bundle("plain");
    p.set(&[], "env > /out/env; touch /out/done", &[&var]);
    assert_ok(
        &h.runc(&["run", "--bundle", &p.bundle_arg(), "plain"]),
        "runc run",
    );
    p.wait_out("done", 5).unwrap();
    assert!(std::fs::read_to_string(p.out.join("env"))
        .unwrap()
        .contains(&token));
    // the claim wins over whatever the annotations ask
    let b = h.bundle("c1");
    b.set(&[("vram", "2g"), ("gpu", "0")], PROBE, &[&var]);
    let o = h.runtime(&["create", "--bundle", &b.bundle_arg(), "c1"]);
    assert_ok(&o, "create");
    let cfg = std::fs::read_to_string(b.config_path()).unwrap();
    assert!(
        !cfg.contains("GPU_QUOTA_CLAIM") && !cfg.contains(&token),
        "the variable is gone from config.json: {cfg}"
    );
    assert_ok(&h.runtime(&["start", "c1"]), "start");
    b.wait_out("done", 20).expect("container ran its probe");
    let limits = std::fs::read_to_string(b.out.join("limits")).unwrap();
    assert!(
        limits.contains(&format!("vram_bytes={}\n", 8 * GIB)),
        "{limits}"
    );
    assert!(limits.contains(&format!("gpus={}\n", uuid(1))), "{limits}");
    let dev = std::fs::read_to_string(b.out.join("dev")).unwrap();
    assert!(dev.lines().any(|l| l == "nvidia1"), "{dev}");
    assert!(
        !dev.lines().any(|l| l == "nvidia0"),
        "only the claim's GPU: {dev}"
    );
    let env = std::fs::read_to_string(b.out.join("env")).unwrap();
    assert!(
        !env.contains("GPU_QUOTA_CLAIM") && !env.contains(&token),
        "{env}"
    );
    // the ledger: the claim's entry and the container bound to it
    let c = containers(&h);
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(c[0]["bound_claim"], UID);
    assert_eq!(c[0]["slices"][0]["bytes"], 8 * GIB);
    assert_eq!(c[0]["slices"][0]["uuid"], uuid(1));
    assert_eq!(claim_entries(&h).len(), 1);
    // ls shows them apart, counts the bytes once, never prints the token
    let text = ls(&h, &[]);
    assert!(
        text.contains(&format!(
            "claim default/vram-8g (uid {UID}) 8.00 GiB on {} (GPU 1): bound to container c1",
            uuid(1)
        )),
        "{text}"
    );
    let json: Value = serde_json::from_str(&ls(&h, &["--json"])).unwrap();
    assert_eq!(json["gpus"][1]["reserved_bytes"], 8 * GIB, "{json}");
    assert!(!json.to_string().contains(&token), "{json}");
    // unprepare while bound: InUse (status 3), nothing changed
    let o = h.claim(&["unprepare", UID]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("in use by running container c1"),
        "{}",
        stderr(&o)
    );
    assert!(h.cdi_spec_path(UID).exists());
    // delete unbinds; the claim stays until unprepare
    assert_ok(&h.runtime(&["delete", "--force", "c1"]), "delete");
    assert!(containers(&h).is_empty());
    assert_eq!(claim_entries(&h).len(), 1);
    assert_ok(&h.claim(&["unprepare", UID]), "unprepare");
    assert!(h.reservations().is_empty());
    assert!(!h.cdi_spec_path(UID).exists(), "the CDI spec is gone");
    let log = std::fs::read_to_string(h.path().join("gq.log")).unwrap();
    assert!(!log.contains(&token), "the token is never logged");
}

#[test]
fn a_wrong_or_unknown_claim_variable_is_refused_with_nothing_reserved() {
    require_e2e!();
    let h = Host::new(HostOpts::default());
    ok_claim(&h, UID, "vram-4g", 0, 4 * GIB);
    let var = h.cdi_env(UID);
    let (name, token) = var.split_once('=').unwrap();
    let mut wrong = token.to_string().into_bytes();
    wrong[0] = if wrong[0] == b'a' { b'b' } else { b'a' };
    let wrong = format!("{name}={}", String::from_utf8(wrong).unwrap());
    let other = h.prepare_claim("0a1b2c3d-0000-4000-8000-00000000c1a2", "other", 1, GIB);
    assert_ok(&other, "second claim");
    let var2 = h.cdi_env("0a1b2c3d-0000-4000-8000-00000000c1a2");
    let cases: [(&str, Vec<String>, &str); 5] = [
        ("wrong", vec![wrong], "does not match the token"),
        (
            "empty",
            vec![format!("{name}=")],
            "does not match the token",
        ),
        (
            "unknown",
            vec![format!(
                "GPU_QUOTA_CLAIM_ffffffff_0000_4000_8000_00000000c1a1={token}"
            )],
            "no claim with that uid is prepared",
        ),
        ("two", vec![var.clone(), var2], "two different claims"),
        // a pod's own GPU_QUOTA_VRAM does not turn a refusal into a grant
        (
            "wrongvram",
            vec![
                format!("{name}=00{}", &token[2..]),
                "GPU_QUOTA_VRAM=1g".into(),
            ],
            "does not match the token",
        ),
    ];
    let before = h.reservations();
    for (id, env, why) in &cases {
        let b = h.bundle(id);
        let env: Vec<&str> = env.iter().map(String::as_str).collect();
        b.set(&[("vram", "1g")], "touch /out/ran", &env);
        let o = h.runtime(&["create", "--bundle", &b.bundle_arg(), id]);
        assert!(!o.status.success(), "[{id}] refused");
        let e = stderr(&o);
        assert!(e.contains("gpu-quota: ") && e.contains(why), "[{id}] {e}");
        assert!(!e.contains(token), "[{id}] the token is not echoed: {e}");
        assert_eq!(h.reservations(), before, "[{id}] nothing reserved");
        assert!(
            state_dirs(&h).is_empty(),
            "[{id}] no state dir: {:?}",
            state_dirs(&h)
        );
        let list = h.runc(&["list", "-q"]);
        assert!(
            !String::from_utf8_lossy(&list.stdout).contains(id),
            "[{id}] not created"
        );
    }
    // negative control: the right variable, same bundle shape, is admitted
    let b = h.bundle("right");
    b.set(&[("vram", "1g")], "touch /out/ran; sleep 600", &[&var]);
    assert_ok(
        &h.runtime(&["create", "--bundle", &b.bundle_arg(), "right"]),
        "create",
    );
    assert_eq!(containers(&h)[0]["slices"][0]["bytes"], 4 * GIB);
    assert_ok(&h.runtime(&["delete", "--force", "right"]), "delete");
    assert!(containers(&h).is_empty());
}

#[test]
fn one_live_container_per_claim_and_the_next_once_it_exits() {
    require_e2e!();
    let h = Host::new(HostOpts::default());
    ok_claim(&h, UID, "vram-2g", 0, 2 * GIB);
    let var = h.cdi_env(UID);
    let first = h.bundle("first");
    first.set(&[], "touch /out/done; sleep 600", &[&var]);
    assert_ok(
        &h.runtime(&["create", "--bundle", &first.bundle_arg(), "first"]),
        "create first",
    );
    assert_ok(&h.runtime(&["start", "first"]), "start first");
    first.wait_out("done", 20).unwrap();
    let second = h.bundle("second");
    second.set(&[], "touch /out/done; sleep 600", &[&var]);
    let o = h.runtime(&["create", "--bundle", &second.bundle_arg(), "second"]);
    assert!(!o.status.success(), "a second live container is refused");
    assert!(
        stderr(&o).contains("already bound to running container first"),
        "{}",
        stderr(&o)
    );
    assert_eq!(containers(&h).len(), 1);
    // the first one's process exits (runc still knows it, stopped)
    assert_ok(&h.runtime(&["kill", "first", "KILL"]), "kill");
    for _ in 0..100 {
        let st = h.runc(&["state", "first"]);
        if String::from_utf8_lossy(&st.stdout).contains("\"stopped\"") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let o = h.runtime(&["create", "--bundle", &second.bundle_arg(), "second"]);
    assert_ok(&o, "create second once the first exited");
    let c = containers(&h);
    assert_eq!(c.len(), 1, "the dead holder was reclaimed: {c:?}");
    assert_eq!(c[0]["container_id"], "second");
    assert_eq!(c[0]["slices"][0]["bytes"], 2 * GIB);
    assert_ok(&h.runtime(&["delete", "--force", "first"]), "delete first");
    assert_eq!(
        containers(&h).len(),
        1,
        "deleting the old one leaves the new binding"
    );
    assert_ok(
        &h.runtime(&["delete", "--force", "second"]),
        "delete second",
    );
    assert_ok(&h.claim(&["unprepare", UID]), "unprepare");
    assert!(h.reservations().is_empty());
}

/// Cluster mode (the container's runc root is a Kubernetes root): a claim
/// is honoured; what a pod spec can set (annotations, env) is not.
#[test]
fn cluster_mode_honours_a_claim_and_nothing_a_pod_sets() {
    require_e2e!();
    let h = Host::new(HostOpts {
        extra_config: "env_requests = true".into(),
        ..HostOpts::default()
    });
    let c = std::fs::read_to_string(h.config()).unwrap();
    std::fs::write(
        h.config(),
        format!(
            "kubernetes_runc_roots = [\"{}\"]\n{c}",
            h.runc_root.display()
        ),
    )
    .unwrap();
    ok_claim(&h, UID, "vram-3g", 1, 3 * GIB);
    let var = h.cdi_env(UID);
    // env alone (what a pod's spec sets): nothing
    let b = h.bundle("podenv");
    b.set(
        &[],
        "ls /dev > /out/dev; touch /out/done",
        &["GPU_QUOTA_VRAM=12g"],
    );
    assert_ok(
        &h.runtime(&["run", "--bundle", &b.bundle_arg(), "podenv"]),
        "run",
    );
    b.wait_out("done", 5).unwrap();
    assert!(!std::fs::read_to_string(b.out.join("dev"))
        .unwrap()
        .contains("nvidia"));
    assert!(containers(&h).is_empty());
    // the claim with a pod's annotations and env asking more: exactly the claim
    let b = h.bundle("pod");
    b.set(
        &[("gpu-quota.io/vram", "12g"), ("gpu-quota.io/gpu", "0")],
        PROBE,
        &["GPU_QUOTA_VRAM=12g", &var],
    );
    assert_ok(
        &h.runtime(&["create", "--bundle", &b.bundle_arg(), "pod"]),
        "create",
    );
    assert_ok(&h.runtime(&["start", "pod"]), "start");
    b.wait_out("done", 20).unwrap();
    let limits = std::fs::read_to_string(b.out.join("limits")).unwrap();
    assert!(
        limits.contains(&format!("vram_bytes={}\n", 3 * GIB)),
        "{limits}"
    );
    assert!(limits.contains(&format!("gpus={}\n", uuid(1))), "{limits}");
    assert_ok(&h.runtime(&["delete", "--force", "pod"]), "delete");
    assert_ok(&h.claim(&["unprepare", UID]), "unprepare");
    assert!(h.reservations().is_empty());
    assert!(!h.cdi_spec_path(UID).exists());
}

/// `gpu-quota release` and `gc` never take a claim's entry (only unprepare
/// does); releasing the bound container unbinds it.
#[test]
fn operator_release_and_gc_leave_the_claim_and_unbind_its_container() {
    require_e2e!();
    let h = Host::new(HostOpts::default());
    ok_claim(&h, UID, "vram-1g", 0, GIB);
    let op = |args: &[&str]| {
        let mut c = std::process::Command::new(bin("gpu-quota"));
        c.env("GPU_QUOTA_CONFIG", h.config()).args(args);
        capture(c)
    };
    for id in [format!("claim:{UID}"), UID.to_string()] {
        let o = op(&["release", "--yes", "--force", &id]);
        assert!(!o.status.success(), "{id}");
        assert!(
            stderr(&o).contains("is the DRA claim default/vram-1g"),
            "{}",
            stderr(&o)
        );
    }
    assert_ok(&op(&["gc"]), "gc");
    assert_eq!(claim_entries(&h).len(), 1, "gc keeps the claim");
    let var = h.cdi_env(UID);
    let b = h.bundle("c");
    b.set(&[], "sleep 600", &[&var]);
    assert_ok(
        &h.runtime(&["create", "--bundle", &b.bundle_arg(), "c"]),
        "create",
    );
    let o = op(&["release", "--yes", "c"]);
    assert!(
        !o.status.success(),
        "a live bound container is not released without --force"
    );
    // its process killed (no delete, no poststop): gc reclaims it, the claim stays
    assert_ok(&h.runc(&["kill", "c", "KILL"]), "kill");
    for _ in 0..100 {
        let st = h.runc(&["state", "c"]);
        if String::from_utf8_lossy(&st.stdout).contains("\"stopped\"") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let o = op(&["gc"]);
    assert_ok(&o, "gc");
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("reclaimed c "),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(containers(&h).is_empty(), "{:?}", h.reservations());
    assert_eq!(claim_entries(&h).len(), 1);
    assert_ok(&h.runtime(&["delete", "--force", "c"]), "delete");
    assert_ok(
        &h.claim(&["unprepare", UID]),
        "unprepare after gc unbound it",
    );
}

/// Review of issue 20: a config.json our parser refuses but runc's reads
/// (Go's encoding/json takes a lone surrogate escape as U+FFFD, serde_json
/// refuses it) used to be passed through to runc untouched when it only
/// carried a claim variable: the container ran unbound, unsliced, with the
/// claim's token in its environment. A claim variable in an unreadable
/// config now refuses the create, as a request there always did.
#[test]
fn a_claim_variable_in_a_config_we_cannot_parse_is_refused_never_passed_through() {
    require_e2e!();
    let h = Host::new(HostOpts::default());
    ok_claim(&h, UID, "vram-4g", 0, 4 * GIB);
    let var = h.cdi_env(UID);
    let token = var.split_once('=').unwrap().1.to_string();
    let odd = |b: &Bundle| {
        b.set(&[], "env > /out/env; touch /out/done", &[&var, "ODD=@@"]);
        let raw = std::fs::read_to_string(b.config_path()).unwrap();
        std::fs::write(b.config_path(), raw.replace("@@", "\\udc00")).unwrap();
        assert!(serde_json::from_slice::<Value>(&std::fs::read(b.config_path()).unwrap()).is_err());
    };
    // negative control: runc itself reads this config and hands the token on
    let p = h.bundle("plain");
    odd(&p);
    assert_ok(
        &h.runc(&["run", "--bundle", &p.bundle_arg(), "plain"]),
        "runc run",
    );
    p.wait_out("done", 5)
        .expect("plain runc ran the odd config");
    assert!(std::fs::read_to_string(p.out.join("env"))
        .unwrap()
        .contains(&token));
    // through the runtime: refused, nothing created, nothing reserved
    let b = h.bundle("odd");
    odd(&b);
    let before = h.reservations();
    let o = h.runtime(&["create", "--bundle", &b.bundle_arg(), "odd"]);
    let list = h.runc(&["list", "-q"]);
    let created = String::from_utf8_lossy(&list.stdout).contains("odd");
    if created {
        let _ = h.runtime(&["delete", "--force", "odd"]);
    }
    assert!(
        !o.status.success() && !created,
        "a claim variable in an unparsable config was passed through to runc: {}",
        stderr(&o)
    );
    let e = stderr(&o);
    assert!(
        e.contains("gpu-quota: ") && e.contains("not valid JSON"),
        "{e}"
    );
    assert!(!e.contains(&token), "{e}");
    assert_eq!(h.reservations(), before);
}

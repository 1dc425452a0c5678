//! The node side of the DRA driver, against real runc: a claim
//! prepared through `core::claims` (the test-only `gq-claim`, as the
//! driver does on NodePrepareResources) and a container whose process.env
//! carries what the claim's CDI device injects. Each security case keeps
//! its negative control (the right token binds; plain runc passes the
//! variable through), so a refusal is the runtime's doing.
use gpu_quota_e2e::*;
use serde_json::Value;

const UID: &str = "0a1b2c3d-0000-4000-8000-00000000c1a1";
const PROBE: &str = "ls /dev > /out/dev; cat /run/gpu-quota/grant > /out/grant 2>/dev/null; cat /run/gpu-quota/limits > /out/limits; env > /out/env; touch /out/done; sleep 600";

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
    assert_eq!(out_grant(&b.out), [8 * GIB], "{limits}");
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

/// The UUID the fake driver (tests/fake) reports for its GPU `i`.
fn fake_uuid(i: u32) -> String {
    format!("GPU-face3344-5566-7788-99aa-bbccddeeff{i:02x}")
}

fn ldd_libs(bin: &std::path::Path) -> Vec<std::path::PathBuf> {
    let o = std::process::Command::new("ldd").arg(bin).output().unwrap();
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| {
            l.split_whitespace()
                .find(|w| w.starts_with('/'))
                .map(std::path::PathBuf::from)
        })
        .collect()
}

/// A host whose driver is the fake one (tests/fake), with the real
/// interceptor, no context charge; its inventory's GPUs are the fake's.
fn cuda_host() -> Host {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf();
    let fake = root.join("tests/fake/build");
    let so = bin("libgpuquota.so");
    assert!(
        fake.join("libcuda.so.1").exists() && so.exists(),
        "build first: make build-debug && make -C tests/fake"
    );
    let h = Host::new(HostOpts {
        lib_dir: Some(fake),
        interceptor: Some(so),
        extra_config: "context_overhead = \"0\"".into(),
        ..HostOpts::default()
    });
    let cfg = std::fs::read_to_string(h.config()).unwrap();
    std::fs::write(
        h.config(),
        cfg.replace(&uuid(0), &fake_uuid(0))
            .replace(&uuid(1), &fake_uuid(1)),
    )
    .unwrap();
    h
}

/// A bundle whose image has the CUDA probe and exactly its libraries.
fn cuda_bundle(h: &Host, name: &str) -> Bundle {
    let b = h.bundle(name);
    let rootfs = b.rootfs();
    let probe = rootfs.join("bin/cuda_probe");
    cc("cuda_probe.c", &probe, &["-ldl"]);
    let mut libs = ldd_libs(&probe);
    libs.extend(ldd_libs(&bin("libgpuquota.so")));
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf();
    libs.extend(ldd_libs(&root.join("tests/fake/build/libcuda.so.1")));
    libs.sort();
    libs.dedup();
    for l in &libs {
        let dst = rootfs.join(l.strip_prefix("/").unwrap());
        std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
        std::fs::copy(std::fs::canonicalize(l).unwrap(), &dst).unwrap();
    }
    b
}

fn run(h: &Host, b: &Bundle, id: &str) {
    assert_ok(
        &h.runtime(&["create", "--bundle", &b.bundle_arg(), id]),
        &format!("create {id}"),
    );
    assert_ok(&h.runtime(&["start", id]), &format!("start {id}"));
}

fn wait_stopped(h: &Host, id: &str) {
    for _ in 0..100 {
        let st = h.runc(&["state", id]);
        if String::from_utf8_lossy(&st.stdout).contains("\"stopped\"") {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("{id} did not stop");
}

const MEM: &str = "FAKE_CUDA_MEM_BYTES=17179869184";

/// A claim is shared by every container the kubelet gave its CDI device
/// (its pod's init, sidecar and regular containers, the pods a named claim
/// is reserved for), as a device would be: each sees the claim's total,
/// together they never use more than it, an exited one's usage is gone;
/// a container presenting a forged variable is still refused.
#[test]
fn a_claims_consumers_share_its_slice_and_an_exited_ones_usage_is_gone() {
    require_e2e!();
    let h = cuda_host();
    let o = h.claim(&[
        "prepare",
        UID,
        "default",
        "shared-4g",
        &fake_uuid(0),
        &(4 * GIB).to_string(),
    ]);
    assert_ok(&o, "gq-claim prepare");
    let var = h.cdi_env(UID);
    // consumer a holds 3 GiB of the claim's 4
    let a = cuda_bundle(&h, "a");
    a.set(&[], "cuda_probe hold 3 600 > /out/hold 2>&1", &[&var, MEM]);
    run(&h, &a, "a");
    let mut held = String::new();
    for _ in 0..200 {
        held = std::fs::read_to_string(a.out.join("hold")).unwrap_or_default();
        if held.contains("rc=") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(held, "alloc 3 GiB rc=0\n");
    // consumer b, at the same time: bound to the same claim, it sees the
    // claim's total and what a left of it; over it is refused, within it not
    let b = cuda_bundle(&h, "b");
    b.set(
        &[],
        "cuda_probe info > /out/info 2>&1; cuda_probe alloc 2 > /out/over 2>&1; \
         cuda_probe alloc 1 > /out/fits 2>&1; touch /out/done; sleep 600",
        &[&var, MEM],
    );
    run(&h, &b, "b");
    b.wait_out("done", 20).expect("b ran its probes");
    let read = |b: &Bundle, n: &str| std::fs::read_to_string(b.out.join(n)).unwrap();
    assert!(
        read(&b, "info").contains(&format!("rc=0 total={} free={}", 4 * GIB, GIB)),
        "b sees the claim's total and a's use: {}",
        read(&b, "info")
    );
    assert!(
        read(&b, "over").contains("alloc 2 GiB rc=2"),
        "together never over the claim: {}",
        read(&b, "over")
    );
    assert!(
        read(&b, "fits").contains("alloc 1 GiB rc=0"),
        "{}",
        read(&b, "fits")
    );
    // the ledger: both bound, the claim's bytes counted once
    let c = containers(&h);
    assert_eq!(c.len(), 2, "{c:?}");
    assert!(c.iter().all(|r| r["bound_claim"] == UID), "{c:?}");
    let json: Value = serde_json::from_str(&ls(&h, &["--json"])).unwrap();
    assert_eq!(json["gpus"][0]["reserved_bytes"], 4 * GIB, "{json}");
    // a container of an unrelated pod: no CDI device, so at most a forged
    // variable; refused while the consumers run, nothing reserved
    let token = var.split_once('=').unwrap().1;
    let forged = var.replace(token, &"0".repeat(token.len()));
    let x = cuda_bundle(&h, "x");
    x.set(&[], "touch /out/done; sleep 600", &[&forged, MEM]);
    let o = h.runtime(&["create", "--bundle", &x.bundle_arg(), "x"]);
    assert!(!o.status.success(), "a forged variable is refused");
    assert!(
        stderr(&o).contains("does not match the token"),
        "{}",
        stderr(&o)
    );
    assert_eq!(containers(&h).len(), 2);
    // a exits (an init container that finished: stopped, not deleted yet):
    // its 3 GiB are gone for the next consumer
    assert_ok(&h.runtime(&["kill", "a", "KILL"]), "kill a");
    wait_stopped(&h, "a");
    let d = cuda_bundle(&h, "d");
    d.set(
        &[],
        "cuda_probe alloc 3.5 > /out/alloc 2>&1; touch /out/done; sleep 600",
        &[&var, MEM],
    );
    run(&h, &d, "d");
    d.wait_out("done", 20).expect("d ran its probe");
    assert!(
        read(&d, "alloc").contains("alloc 3.5 GiB rc=0"),
        "the exited consumer's usage is gone: {}",
        read(&d, "alloc")
    );
    // unprepare waits for the last consumer; the shared usage goes with it
    let o = h.claim(&["unprepare", UID]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let shared = h.path().join("state/claims").join(UID);
    assert!(shared.join("rw/usage").exists());
    for id in ["a", "b", "d"] {
        assert_ok(
            &h.runtime(&["delete", "--force", id]),
            &format!("delete {id}"),
        );
    }
    assert!(
        !shared.exists(),
        "the claim's shared usage went with its last consumer"
    );
    assert_ok(&h.claim(&["unprepare", UID]), "unprepare");
    assert!(h.reservations().is_empty());
}

/// One consumer after another (an init container, then the main one): the
/// second is bound once the first exited, and deleting the first leaves
/// the second's binding.
#[test]
fn consumers_one_after_another_keep_the_later_binding() {
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
    assert_ok(&h.runtime(&["kill", "first", "KILL"]), "kill");
    wait_stopped(&h, "first");
    let second = h.bundle("second");
    second.set(&[], "touch /out/done; sleep 600", &[&var]);
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
    assert_eq!(out_grant(&b.out), [3 * GIB], "{limits}");
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

/// A config.json our parser refuses but runc's reads
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
    let p = h.bundle("plain2");
    odd(&p);
    assert_ok(
        &h.runc(&["run", "--bundle", &p.bundle_arg(), "plain2"]),
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

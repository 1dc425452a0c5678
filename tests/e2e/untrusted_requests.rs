//! Untrusted images and tenants, against real runc 1.1.5. One test
//! per class of attack; each keeps a negative control that shows the check
//! can fail (the attack's premise holds here, or the old step, reproduced in
//! the harness, does reach the host).
//!
//! This file: where a request may come from (never the image's environment;
//! never env_requests for Kubernetes containers).
use gpu_quota_e2e::*;

/// Class 2: annotation `vram=1g` plus image `ENV GPU_QUOTA_GPUS=2` gave the
/// container both GPUs. One request has one source; env requests only
/// where the host allows them.
#[test]
fn image_environment_never_adds_to_a_request() {
    require_e2e!();
    let script = "ls /dev > /out/dev; cat /run/gpu-quota/grant > /out/grant 2>/dev/null; cat /run/gpu-quota/limits > /out/limits 2>&1; echo \"$GPU_QUOTA_GPUS\" > /out/envseen; touch /out/done; sleep 600";
    let env = ["GPU_QUOTA_GPUS=2", "GPU_QUOTA_VRAM=8g"];
    for extra in ["", "env_requests = true"] {
        let h = Host::new(HostOpts {
            extra_config: extra.into(),
            ..HostOpts::default()
        });
        let b = h.bundle("mix");
        b.set(&[("vram", "1g")], script, &env);
        assert_ok(
            &h.runtime(&["create", "--bundle", &b.bundle_arg(), "mix"]),
            "create",
        );
        assert_ok(&h.runtime(&["start", "mix"]), "start");
        b.wait_out("done", 5).expect("container ran");
        let read = |n: &str| std::fs::read_to_string(b.out.join(n)).unwrap();
        assert_eq!(
            read("envseen"),
            "2\n",
            "negative control: the image env is really there"
        );
        let r = h.reservations();
        assert_eq!(r.len(), 1);
        let slices = r[0]["slices"].as_array().unwrap();
        assert_eq!(slices.len(), 1, "[{extra}] the env added GPUs: {r:?}");
        assert_eq!(slices[0]["bytes"], GIB);
        let gpus = read("dev")
            .lines()
            .filter(|l| l.starts_with("nvidia") && l[6..].parse::<u32>().is_ok())
            .count();
        assert_eq!(gpus, 1, "[{extra}] {}", read("dev"));
        assert_eq!(out_grant(&b.out), [GIB]);
        h.cleanup();
    }

    // env alone: ignored by default (with a notice), a request where allowed
    for (extra, granted) in [("", false), ("env_requests = true", true)] {
        let h = Host::new(HostOpts {
            extra_config: extra.into(),
            ..HostOpts::default()
        });
        let b = h.bundle("envonly");
        b.set(
            &[],
            "ls /dev > /out/dev; touch /out/done",
            &["GPU_QUOTA_VRAM=2g"],
        );
        let o = h.runtime(&["run", "--bundle", &b.bundle_arg(), "envonly"]);
        assert_ok(&o, "run");
        b.wait_out("done", 5).unwrap();
        let dev = std::fs::read_to_string(b.out.join("dev")).unwrap();
        assert_eq!(dev.contains("nvidia0"), granted, "[{extra}] {dev}");
        if !granted {
            assert!(
                stderr(&o).contains("ignoring GPU_QUOTA_VRAM"),
                "a notice says why: {}",
                stderr(&o)
            );
        }
    }
}

/// Class 2: `env_requests` was host-wide, so `install docker` for
/// Docker < 24 turned it on for the CRI handler too and a pod's
/// `GPU_QUOTA_VRAM` bypassed the scheduler. A container whose runc root is a
/// Kubernetes root (`kubernetes_runc_roots`) never takes a request from its
/// environment, whatever `env_requests` says; annotations still work there.
#[test]
fn kubernetes_containers_never_take_env_requests() {
    require_e2e!();
    // negative control first: the same host with another runc root grants
    for kubernetes in [false, true] {
        let h = Host::new(HostOpts {
            extra_config: "env_requests = true".into(),
            ..HostOpts::default()
        });
        if kubernetes {
            let c = std::fs::read_to_string(h.config()).unwrap();
            std::fs::write(
                h.config(),
                format!(
                    "kubernetes_runc_roots = [\"{}/\"]\n{c}",
                    h.runc_root.display()
                ),
            )
            .unwrap();
        }
        let b = h.bundle("podenv");
        b.set(
            &[],
            "ls /dev > /out/dev; touch /out/done",
            &["GPU_QUOTA_VRAM=2g"],
        );
        let o = h.runtime(&["run", "--bundle", &b.bundle_arg(), "podenv"]);
        assert_ok(&o, "run");
        b.wait_out("done", 5).unwrap();
        let dev = std::fs::read_to_string(b.out.join("dev")).unwrap();
        assert_eq!(
            dev.contains("nvidia0"),
            !kubernetes,
            "[kubernetes root: {kubernetes}] {dev} {}",
            stderr(&o)
        );
        if kubernetes {
            assert!(h.reservations().is_empty(), "{:?}", h.reservations());
            assert!(
                stderr(&o).contains("ignoring GPU_QUOTA_VRAM") && stderr(&o).contains("Kubernetes"),
                "a notice says why: {}",
                stderr(&o)
            );
            // the scheduler's way in (the device plugin's annotation) still grants
            let b = h.bundle("podann");
            b.set(
                &[("gpu-quota.io/vram", "1g")],
                "ls /dev > /out/dev; touch /out/done",
                &["GPU_QUOTA_VRAM=2g"],
            );
            let o = h.runtime(&["run", "--bundle", &b.bundle_arg(), "podann"]);
            assert_ok(&o, "run");
            b.wait_out("done", 5).unwrap();
            let dev = std::fs::read_to_string(b.out.join("dev")).unwrap();
            assert!(dev.contains("nvidia0"), "{dev} {}", stderr(&o));
        }
        h.cleanup();
    }
}

//! Admission refuses what no CUDA program could use, before runc runs: a
//! slice no larger than the context every process is charged, where that
//! charge is known (configured, or measured on this host).
use gpu_quota_e2e::*;

const MIB: u64 = 1 << 20;

fn host(extra: &str) -> Host {
    Host::new(HostOpts {
        extra_config: extra.into(),
        ..HostOpts::default()
    })
}

/// A cache entry as the hook's measurement writes it (core::ctxcost).
fn measured_cache(h: &Host, charge: u64, error: Option<&str>) {
    let measured = if error.is_none() {
        serde_json::json!({"uuid": uuid(0), "gpu_name": "Simulated GPU", "driver_version": "580.159.04",
            "nvml_used_bytes": charge - 94 * MIB, "alloc_bytes": 2 * MIB, "context_bytes": charge - 96 * MIB})
    } else {
        serde_json::Value::Null
    };
    let cache = serde_json::json!({"version": 1, "entries": [{
        "key": {"driver_version": "580.159.04", "gpu_name": "Simulated GPU"},
        "charge_bytes": charge, "measured": measured, "error": error, "at_unix": 1}]});
    let dir = h.path().join("ledger");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("context-cost.json"), cache.to_string()).unwrap();
}

/// `vram` for container `id`: the runtime's output, and whether runc ever
/// made the container.
fn create(h: &Host, id: &str, vram: &str) -> (std::process::Output, bool) {
    let b = h.bundle(id);
    b.set(&[("vram", vram)], "sleep 600", &[]);
    let o = h.runtime(&["create", "--bundle", &b.bundle_arg(), id]);
    let made = h.runc(&["state", id]).status.success();
    if made {
        let _ = h.runtime(&["delete", "--force", id]);
    }
    (o, made)
}

#[test]
fn a_slice_below_the_configured_context_charge_is_refused_before_runc_with_both_figures() {
    require_e2e!();
    let h = host("context_overhead = \"614m\"");
    let (o, made) = create(&h, "small", "512m");
    let err = stderr(&o);
    assert!(
        !o.status.success() && !made,
        "512m must be refused before runc: {err}"
    );
    for want in [
        "512.00 MiB",
        "614.00 MiB",
        "616.00 MiB",
        "context_overhead",
        "vram=616m",
    ] {
        assert!(err.contains(want), "{want:?} missing in: {err}");
    }
    assert_eq!(
        err.matches("gpu-quota:").count(),
        1,
        "one prefix, once: {err}"
    );
    assert!(h.reservations().is_empty());
    // negative control: a slice that holds the context and more is admitted
    let (o, made) = create(&h, "big", "1g");
    assert!(o.status.success() && made, "1g: {}", stderr(&o));
}

#[test]
fn a_slice_below_the_measured_context_charge_is_refused_and_an_unknown_charge_is_not() {
    require_e2e!();
    let h = host("");
    // nothing measured yet: admitted (the interceptor names the quota at the
    // first CUDA call instead)
    let (o, made) = create(&h, "unknown", "512m");
    assert!(o.status.success() && made, "{}", stderr(&o));
    // a failed measurement is not a known cost either
    measured_cache(&h, 616 * MIB, Some("driver busy"));
    let (o, made) = create(&h, "failed", "512m");
    assert!(o.status.success() && made, "{}", stderr(&o));
    measured_cache(&h, 614 * MIB, None);
    let (o, made) = create(&h, "measured", "512m");
    let err = stderr(&o);
    assert!(!o.status.success() && !made, "{err}");
    for want in [
        "512.00 MiB",
        "614.00 MiB",
        "measured on this host",
        "616.00 MiB",
    ] {
        assert!(err.contains(want), "{want:?} missing in: {err}");
    }
    let (o, made) = create(&h, "fits", "1g");
    assert!(o.status.success() && made, "{}", stderr(&o));
}

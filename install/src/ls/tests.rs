use super::*;
use gpuquota_core::formats::grant::Burst;
use gpuquota_core::ledger::ResState;
use gpuquota_core::placement::Slice;

const G: u64 = 1 << 30;

fn reservation(id: &str, slices: Vec<Slice>, request: &str) -> Reservation {
    Reservation {
        state: ResState::Running,
        ..Reservation::new(id, Some("/run/runc"), format!("/b/{id}"), slices, request)
    }
}

/// `vram=4g vram-limit=16g vram-priority=9` on GPU 0.
fn burster() -> Reservation {
    let mut s = Slice::memory("GPU-0".into(), 0, 4 * G);
    s.burst = Some(Burst {
        limit_bytes: 16 * G,
        priority: 9,
    });
    reservation(
        "burst",
        vec![s],
        "vram=4.00 GiB vram-limit=16.00 GiB vram-priority=9",
    )
}

fn guaranteed() -> Reservation {
    reservation(
        "plain",
        vec![Slice::memory("GPU-0".into(), 0, 8 * G)],
        "vram=8.00 GiB",
    )
}

/// A usage file whose device 0 holds `bytes`.
fn holding(bytes: u64) -> Usage {
    let mut used = vec![0; usage::DEV_COUNT];
    used[0] = bytes;
    Usage {
        used,
        ..Default::default()
    }
}

#[test]
fn a_bursters_slice_reads_guarantee_to_limit_and_above_what_it_holds_past_it() {
    let b = burster();
    let r = row(&b, false, Some(&holding(6 * G)), 0);
    assert_eq!(r.slice, "4.00 GiB..16.00 GiB");
    assert_eq!(r.used, "6.00 GiB");
    assert_eq!(r.above, "2.00 GiB", "6 held of a 4 GiB guarantee");
    // within its guarantee it holds nothing lent
    assert_eq!(row(&b, false, Some(&holding(3 * G)), 0).above, "0 B");
    // before any CUDA process: unknown, as USED
    assert_eq!(row(&b, false, None, 0).above, "-");
    // a guaranteed slice never shows lent memory, even past its slice
    let g = guaranteed();
    let r = row(&g, false, Some(&holding(9 * G)), 0);
    assert_eq!((r.slice.as_str(), r.above.as_str()), ("8.00 GiB", "-"));
    // the table keeps its columns aligned around the wider SLICE
    let t = table(&[row(&b, false, Some(&holding(6 * G)), 0), r]);
    assert!(t[0].contains(" USED        ABOVE "), "{}", t[0]);
    let col = |l: &str, w: &str| l.find(w).map(|i| i + w.len());
    assert_eq!(col(&t[0], "SLICE"), col(&t[1], "16.00 GiB"), "{t:#?}");
    assert_eq!(col(&t[0], "SLICE"), col(&t[2], "8.00 GiB"), "{t:#?}");
    assert_eq!(col(&t[0], "ABOVE"), col(&t[1], "2.00 GiB"), "{t:#?}");
}

#[test]
fn json_gains_burst_fields_for_bursters_only() {
    let mut u = holding(6 * G);
    let v = reservation_json(&burster(), false, Some(&u));
    let s = &v["slices"][0];
    assert_eq!(s["limit_bytes"], 16 * G);
    assert_eq!(s["priority"], 9);
    assert_eq!(s["above_bytes"], 2 * G);
    assert_eq!(s["bytes"], 4 * G, "bytes stays the guarantee");
    assert!(v.get("reclaim_waits").is_none(), "no waits: left out");
    // before a CUDA process ran, what it holds above is unknown
    let v = reservation_json(&burster(), false, None);
    assert_eq!(v["slices"][0]["limit_bytes"], 16 * G);
    assert!(v["slices"][0].get("above_bytes").is_none(), "{v}");
    // a guaranteed slice is what it was: none of the new fields
    u.reclaim_waits = 3;
    u.reclaim_last_ms = 152;
    let v = reservation_json(&guaranteed(), false, Some(&u));
    let s = v["slices"][0].as_object().unwrap();
    for k in ["limit_bytes", "priority", "above_bytes"] {
        assert!(!s.contains_key(k), "{k} in {v}");
    }
    // its allocations that waited for bursters to give memory back
    assert_eq!(v["reclaim_waits"], 3);
    assert_eq!(v["reclaim_last_ms"], 152);
    assert_eq!(v["used_bytes"], 6 * G);
}

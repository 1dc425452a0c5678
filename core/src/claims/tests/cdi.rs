//! A claim's CDI spec and token.
use super::*;

#[test]
fn the_cdi_spec_is_the_one_variable_in_a_0600_file_in_a_0755_directory() {
    let (_d, cfg) = setup();
    prepare(&cfg, &alloc("3f6c-a1", GPU1, 8 * G)).unwrap();
    let t = token_of(&cfg, "3f6c-a1");
    let p = cfg.cdi_dir.join("vram.gpu-quota.io-claim-3f6c-a1.json");
    assert_eq!(p, cdi_path(&cfg, "3f6c-a1"));
    let v: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    assert_eq!(
        v,
        serde_json::json!({
            "cdiVersion": "0.6.0",
            "kind": "vram.gpu-quota.io/claim",
            "devices": [{"name": "3f6c-a1", "containerEdits": {"env": [format!("GPU_QUOTA_CLAIM_3f6c_a1={t}")]}}]
        })
    );
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(&p), 0o600);
    assert_eq!(mode(&cfg.cdi_dir), 0o755);
    assert_eq!(
        mode(&Ledger::new(&cfg).path()),
        0o600,
        "the ledger holds the token"
    );
    // no temp file left
    let names: Vec<_> = std::fs::read_dir(&cfg.cdi_dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
}

#[test]
fn tokens_are_random_256_bits_and_never_logged_or_printed() {
    let (_d, cfg) = setup();
    prepare(&cfg, &alloc("u-1", GPU0, G)).unwrap();
    prepare(&cfg, &alloc("u-2", GPU0, G)).unwrap();
    let (a, b) = (token_of(&cfg, "u-1"), token_of(&cfg, "u-2"));
    for t in [&a, &b] {
        assert_eq!(t.len(), 64, "{t}");
        assert!(t.bytes().all(|c| c.is_ascii_hexdigit()));
    }
    assert_ne!(a, b);
    assert_ne!(a, "0".repeat(64));
    // a binding refused for a wrong token; an unprepare refused while bound
    let e = bind(
        &cfg,
        &presenting("u-1", &b),
        "x",
        "/r",
        "/b",
        None,
        &mut vec![],
    )
    .unwrap_err();
    bind(
        &cfg,
        &presenting("u-1", &a),
        "y",
        "/r",
        "/b",
        None,
        &mut vec![],
    )
    .unwrap();
    let inuse = unprepare(&cfg, "u-1").unwrap_err();
    unprepare(&cfg, "u-2").unwrap();
    let log = std::fs::read_to_string(&cfg.log_file).unwrap();
    assert!(
        log.contains("claim:u-1") && log.contains("claim:u-2"),
        "events logged: {log}"
    );
    let data = Ledger::new(&cfg).read().unwrap();
    let printed = format!(
        "{log}{e}{e:?}{inuse}{inuse:?}{data:?}{:?}",
        presenting("u-1", &a)
    );
    for t in [&a, &b] {
        assert!(!printed.contains(t.as_str()), "token {t} in {printed}");
    }
}

/// What a prepare does with a hostile CDI directory or
/// spec path, and an old 0644 ledger. A directory that is a link or
/// writable by others is refused with nothing reserved; a link planted at
/// the spec path is replaced, never written through; a temp file name
/// planted as a link is not followed; a ledger left 0644 by an older
/// gpu-quota is 0600 from the write that first puts a token in it.
#[test]
fn hostile_cdi_paths_and_an_old_0644_ledger() {
    use std::os::unix::fs::symlink;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    // the CDI directory a link (to a directory an attacker chose)
    let (d, cfg) = setup();
    let elsewhere = d.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    symlink(&elsewhere, &cfg.cdi_dir).unwrap();
    let e = prepare(&cfg, &alloc("u-1", GPU0, G)).unwrap_err();
    assert!(e.to_string().contains("symlink"), "{e}");
    assert!(entries(&cfg).is_empty(), "nothing reserved");
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    // group-writable
    let (_d, cfg) = setup();
    std::fs::create_dir(&cfg.cdi_dir).unwrap();
    std::fs::set_permissions(&cfg.cdi_dir, std::fs::Permissions::from_mode(0o775)).unwrap();
    let e = prepare(&cfg, &alloc("u-1", GPU0, G)).unwrap_err();
    assert!(e.to_string().contains("writable by group"), "{e}");
    assert!(entries(&cfg).is_empty(), "nothing reserved");
    // a link at the spec path, a link at the temp file's name, an old ledger
    let (d, cfg) = setup();
    container(&cfg, "docker1", 1, G);
    std::fs::set_permissions(
        Ledger::new(&cfg).path(),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    std::fs::create_dir(&cfg.cdi_dir).unwrap();
    let victim = d.path().join("victim");
    std::fs::write(&victim, "keep").unwrap();
    let spec = cdi_path(&cfg, "u-1");
    symlink(&victim, &spec).unwrap();
    let tmp = cfg.cdi_dir.join(format!(
        ".{}.tmp.{}",
        spec.file_name().unwrap().to_string_lossy(),
        std::process::id()
    ));
    symlink(&victim, &tmp).unwrap();
    assert!(
        prepare(&cfg, &alloc("u-1", GPU0, G)).is_err(),
        "the planted temp link is not followed"
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
    assert_eq!(entries(&cfg).len(), 1, "nothing reserved");
    std::fs::remove_file(&tmp).unwrap();
    prepare(&cfg, &alloc("u-1", GPU0, G)).unwrap();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
    assert!(!std::fs::symlink_metadata(&spec)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(mode(&spec), 0o600);
    assert_eq!(mode(&Ledger::new(&cfg).path()), 0o600, "tightened");
    // a directory at the spec path: refused, nothing reserved
    std::fs::create_dir(cdi_path(&cfg, "u-2")).unwrap();
    assert!(prepare(&cfg, &alloc("u-2", GPU0, G)).is_err());
    assert_eq!(entries(&cfg).len(), 2);
}

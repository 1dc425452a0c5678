//! Config::parse of arbitrary UTF-8 (TOML).
#![no_main]
use gpuquota_core::Config;
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|s: &str| {
    let path = Path::new("/etc/gpu-quota/config.toml");
    let r = Config::parse(s, path);
    match &r {
        Ok(c) => {
            // parse validated these, so they cannot fail later
            c.reserve_bytes().expect("reserve validated by parse");
            c.context_overhead_bytes()
                .expect("context_overhead validated by parse");
            for g in &c.inventory.gpu {
                g.memory_bytes()
                    .expect("inventory memory validated by parse");
            }
            let _ = c.ledger_path();
            // deterministic
            assert_eq!(Config::parse(s, path).ok().as_ref(), Some(c));
        }
        Err(e) => {
            assert!(e.to_string().contains("/etc/gpu-quota/config.toml"), "{e}");
        }
    }
});

//! The standalone interceptor finds the context-cost cache where the host
//! writes it: gpuquota_formats::ctxcost::standalone_cache_path reads the
//! host configuration's `ledger_dir` with a small scanner (no TOML parser
//! in a no_std cdylib); here it is held against the host's own parser.
use gpuquota_core::config::Config;
use gpuquota_core::ctxcost::Cache;
use gpuquota_core::formats::ctxcost::{ledger_dir_from_config, standalone_cache_path, MAX_PATH};
use std::path::Path;

/// Configurations as people and `gpu-quota install` write them, and
/// spellings the scanner must not misread.
const CONFIGS: &[&str] = &[
    "",
    "ledger_dir = \"/srv/gq\"\n",
    "# host\nledger_dir = '/srv/gq ledger' # literal string\nstate_dir = \"/run/x\"\n",
    "env_requests = true\r\nledger_dir=\"/srv/crlf\"\r\n",
    "reserve = \"1g\"\n\n[driver]\nlib_dirs = [\"/l\"]\n",
    "gpus = [\n  \"0\",\n  \"1\",\n]\nledger_dir = \"/srv/after-array\"\n",
    "ledger_dir = \"/srv/esc\\u0061ped\"\n",
    "ledger_dir = \"/srv/quote\\\"d\"\n",
    "\"ledger_dir\" = \"/srv/quoted-key\"\n",
    "[inventory]\nsource = \"nvml\"\n",
    "log = \"file\" # ledger_dir = \"/not/this\"\n",
];

#[test]
fn standalone_cache_path_agrees_with_the_host() {
    let mut found = 0;
    for text in CONFIGS {
        let cfg = Config::parse(text, Path::new("config.toml"))
            .unwrap_or_else(|e| panic!("{text:?} is a valid config: {e}"));
        let host = Cache::new(&cfg.ledger_dir).path().to_path_buf();
        if let Some(d) = ledger_dir_from_config(text.as_bytes()) {
            // what the scanner reads is what the host reads
            assert_eq!(
                Path::new(std::str::from_utf8(d).unwrap()),
                cfg.ledger_dir,
                "{text:?}"
            );
            found += 1;
        }
        let mut out = [0u8; MAX_PATH];
        let c = standalone_cache_path(Some(text.as_bytes()), &mut out);
        let standalone = Path::new(c.to_str().unwrap());
        if cfg.ledger_dir == Path::new(gpuquota_core::formats::layout::DEFAULT_LEDGER_DIR)
            || ledger_dir_from_config(text.as_bytes()).is_some()
        {
            assert_eq!(standalone, host, "{text:?}");
        } else {
            // a spelling the scanner leaves alone: the default, as before
            assert!(
                ["esc", "quote", "quoted-key"]
                    .iter()
                    .any(|k| text.contains(k)),
                "{text:?}: the scanner should read this spelling"
            );
        }
    }
    // the plain spellings above are read, not only defaulted
    assert_eq!(found, 4);
}

//! `gpu-quota burst-supervise`: takes lent memory back from burstable
//! slices when the driver could not (`gpuquota_core::burst`), run as a
//! service of its own (deploy/gpu-quota-burst-supervise.service). Each
//! round it reads the ledger, keeps every grant's reclaim word right (so
//! that an allocation within a guarantee beside bursters waits for it
//! instead of failing), and ends one burster per GPU where such an
//! allocation waits, in order. Without it bursting still works (the
//! driver evicts lent pages), but nothing waits and nobody is ended.
use anyhow::Result;
use gpuquota_core::burst::{self, end};
use gpuquota_core::events::{self, BurstEnd, Source};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct BurstArgs {
    /// Milliseconds between two rounds.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(10..=10_000))]
    pub interval_ms: u64,
    /// Milliseconds to let an ended burster's memory go before ending the
    /// next on its GPU (a killed burster's 100 GiB were free within 1.12 s
    /// on the H200).
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub settle_ms: u64,
}

const SOURCE: Source<'static> = Source {
    program: "gpu-quota",
    engine: "operator",
    cause: "burst-supervisor",
};

pub fn run(a: &BurstArgs) -> Result<()> {
    let (cfg, ledger) = crate::ops::load()?;
    let wait = gpuquota_core::formats::grant::reclaim_wait_ms(cfg.burst_reclaim_wait_ms);
    eprintln!(
        "gpu-quota burst-supervise: every {} ms; an allocation within a guarantee beside burstable slices waits up to {wait} ms for bursters to be ended",
        a.interval_ms
    );
    let files = end::Files { cfg: &cfg };
    let mut ended: BTreeMap<String, Instant> = BTreeMap::new();
    let mut said = String::new();
    // each doubted wait said once
    let mut doubts: Vec<String> = vec![];
    loop {
        let data = if ledger.exists() {
            ledger.read()
        } else {
            Ok(Default::default())
        };
        match data {
            Ok(d) => {
                let settle = Duration::from_millis(a.settle_ms);
                ended.retain(|_, t| t.elapsed() < settle);
                let round = burst::plan(&d, wait, &files, &|u| ended.contains_key(u));
                for w in &round.words {
                    let r = &d.reservations[w.container];
                    // a container that ended meanwhile has no grant to set
                    let _ = files.set_word(r, &w.uuid, w.word);
                }
                for (i, uuid, why) in &round.doubted {
                    let line = format!(
                        "a wait by container {} on {uuid} is not believed: {why}",
                        d.reservations[*i].container_id
                    );
                    if !doubts.contains(&line) {
                        eprintln!("gpu-quota burst-supervise: {line}");
                        doubts.push(line);
                    }
                }
                for e in &round.ends {
                    let (v, w) = (&d.reservations[e.victim], &d.reservations[e.waiter]);
                    let line = burst::end_line(e);
                    let fact = BurstEnd {
                        uuid: &e.uuid,
                        index: e.index,
                        above: e.above,
                        priority: e.priority,
                        want: e.want,
                    };
                    match end::end(v, &line) {
                        Ok(told) => {
                            eprintln!(
                                "gpu-quota burst-supervise: ended {} on GPU {} for {} ({}): {line}",
                                v.container_id,
                                e.index,
                                w.container_id,
                                match told {
                                    end::Told::Stderr => "told on its stderr",
                                    end::Told::EventOnly => "its stderr is not a pipe",
                                }
                            );
                            events::burst_reclaim(&cfg, SOURCE, v, w, fact, None);
                        }
                        Err(err) => {
                            eprintln!("gpu-quota burst-supervise: {err}");
                            events::burst_reclaim(&cfg, SOURCE, v, w, fact, Some(&err.to_string()));
                        }
                    }
                    ended.insert(e.uuid.clone(), Instant::now());
                }
                said.clear();
            }
            Err(e) => {
                let line = e.to_string();
                if line != said {
                    eprintln!("gpu-quota burst-supervise: {line}; trying again");
                    said = line;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(a.interval_ms));
    }
}

//! Which container an operator's CONTAINER argument names: the one lookup
//! of every command that takes one (`resize`; `release`, whole ids only).
//!
//! An id comes from the engine; a name (nerdctl's `nerdctl/name`, a pod's
//! container) comes from the annotations whoever starts the container
//! passes, so a name may be chosen to look like another container's id.
//! Hence the order: an exact id always wins; then ids that start with the
//! argument and names equal to it are taken together, and more than one
//! container among them is refused, naming each by id and name (a name
//! that is another container's short id never takes the place of that
//! container).
use gpuquota_core::Reservation;

/// What may name a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Accept {
    /// The whole id only (`release`: a destructive command, most often
    /// run on a stale reservation, whose id prefix may by then start
    /// another container's id).
    Id,
    /// The whole id, a prefix of it, or the name (the WORKLOAD `gpu-quota
    /// ls` shows).
    IdPrefixOrName,
}

/// Why no single container was found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Miss {
    /// Nothing matches; the caller says what to do.
    NotFound,
    /// More than one container matches: the message names each.
    Ambiguous(String),
}

/// One line per container: id, name, runc root.
fn describe(r: &Reservation) -> String {
    let name = r
        .workload
        .as_ref()
        .map(|w| w.label())
        .filter(|l| !l.is_empty())
        .map(|l| format!("name {l}, "))
        .unwrap_or_default();
    format!(
        "{} ({name}runc root {})",
        r.container_id,
        r.runtime_root.as_deref().unwrap_or("runc's default")
    )
}

fn named(r: &Reservation, q: &str) -> bool {
    r.workload
        .as_ref()
        .is_some_and(|w| w.label() == q || w.container.as_deref() == Some(q))
}

/// The one container of `held` that `q` names, among the containers (not
/// DRA claims) `keep` accepts, under the runc root `root` when one is given.
pub(crate) fn find<'a>(
    held: &'a [Reservation],
    q: &str,
    root: Option<&str>,
    accept: Accept,
    keep: &dyn Fn(&Reservation) -> bool,
) -> Result<&'a Reservation, Miss> {
    let cands: Vec<&Reservation> = held
        .iter()
        .filter(|r| !r.is_claim() && keep(r))
        .filter(|r| root.is_none_or(|x| r.runtime_root.as_deref() == Some(x)))
        .collect();
    let exact: Vec<&Reservation> = cands
        .iter()
        .copied()
        .filter(|r| r.container_id == q)
        .collect();
    if let [r] = exact.as_slice() {
        return Ok(r);
    }
    if !exact.is_empty() {
        // one id under several runc roots (two engines)
        let all: Vec<String> = exact.iter().map(|r| describe(r)).collect();
        return Err(Miss::Ambiguous(format!(
            "container id {q:?} is held under {} runc roots: {}; say which with --runtime-root DIR",
            all.len(),
            all.join(", ")
        )));
    }
    if accept == Accept::Id {
        return Err(Miss::NotFound);
    }
    let by_id = |r: &&Reservation| !q.is_empty() && r.container_id.starts_with(q);
    let by_name = |r: &&Reservation| named(r, q);
    let found: Vec<&Reservation> = cands
        .iter()
        .copied()
        .filter(|r| by_id(r) || by_name(r))
        .collect();
    match found.as_slice() {
        [] => Err(Miss::NotFound),
        [r] => Ok(r),
        many => {
            let prefixed: Vec<String> = many
                .iter()
                .filter(|r| by_id(r))
                .map(|r| describe(r))
                .collect();
            let with_name: Vec<String> = many
                .iter()
                .filter(|r| by_name(r) && !by_id(r))
                .map(|r| describe(r))
                .collect();
            let msg = match (prefixed.is_empty(), with_name.is_empty()) {
                (false, false) => format!(
                    "{q:?} is ambiguous: it starts the id of {} and is the name of {}; give the whole id (a container's name never stands for another container's id)",
                    prefixed.join(", "),
                    with_name.join(", ")
                ),
                (false, true) => format!(
                    "{q:?} starts the ids of {} containers: {}; give more of the id, or --runtime-root",
                    many.len(),
                    prefixed.join(", ")
                ),
                _ => format!(
                    "{q:?} is the name of {} containers: {}; give the id",
                    many.len(),
                    with_name.join(", ")
                ),
            };
            Err(Miss::Ambiguous(msg))
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use gpuquota_core::placement::Slice;
    use gpuquota_core::workload::Workload;

    pub(crate) fn res(id: &str, root: Option<&str>, name: Option<&str>) -> Reservation {
        let s = Slice::memory("GPU-0".into(), 0, 1 << 30);
        Reservation {
            workload: name.map(|n| Workload {
                container: Some(n.into()),
                ..Workload::default()
            }),
            ..Reservation::new(id, root, "/b", vec![s], "vram=1g")
        }
    }

    fn id(held: &[Reservation], q: &str, accept: Accept) -> Result<String, Miss> {
        find(held, q, None, accept, &|_| true).map(|r| r.container_id.clone())
    }

    fn ambiguous(r: Result<String, Miss>) -> String {
        match r {
            Err(Miss::Ambiguous(m)) => m,
            other => panic!("not refused as ambiguous: {other:?}"),
        }
    }

    const VICTIM: &str = "3f9a1c2b7d4e8f6a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a";
    const ATTACKER: &str = "9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b1a0f9e8d";

    /// The round-4 finding: a container started with
    /// `--annotation nerdctl/name=<the victim's short id>` was the one the
    /// operator's `resize <short id>` grew (names were tried before id
    /// prefixes).
    #[test]
    fn a_name_that_is_another_containers_short_id_is_refused() {
        let short = &VICTIM[..12];
        let held = vec![
            res(VICTIM, None, Some("web")),
            res(ATTACKER, None, Some(short)),
        ];
        let m = ambiguous(id(&held, short, Accept::IdPrefixOrName));
        assert!(
            m.contains(VICTIM) && m.contains(ATTACKER) && m.contains("name web"),
            "both named, by id and name: {m}"
        );
        assert!(m.contains(&format!("name {short}")), "{m}");
        // the whole id is the victim's, whatever the names
        assert_eq!(id(&held, VICTIM, Accept::IdPrefixOrName).unwrap(), VICTIM);
        // a name that is no id prefix still names its container
        assert_eq!(id(&held, "web", Accept::IdPrefixOrName).unwrap(), VICTIM);
    }

    #[test]
    fn an_exact_id_wins_over_names_and_longer_ids() {
        let held = vec![
            res("abc", None, None),
            res("abcdef", None, Some("x")),
            res("zzz", None, Some("abc")),
        ];
        assert_eq!(id(&held, "abc", Accept::IdPrefixOrName).unwrap(), "abc");
        assert_eq!(id(&held, "abcd", Accept::IdPrefixOrName).unwrap(), "abcdef");
    }

    #[test]
    fn prefixes_and_names_each_name_one_container() {
        let held = vec![
            res("abc123", None, Some("web")),
            res("abd456", None, None),
            // a name that starts its own id names one container
            res("f00d99", None, Some("f00d")),
        ];
        assert_eq!(id(&held, "abd", Accept::IdPrefixOrName).unwrap(), "abd456");
        assert_eq!(id(&held, "web", Accept::IdPrefixOrName).unwrap(), "abc123");
        assert_eq!(id(&held, "f00d", Accept::IdPrefixOrName).unwrap(), "f00d99");
        let m = ambiguous(id(&held, "ab", Accept::IdPrefixOrName));
        assert!(m.contains("ids of 2 containers") && m.contains("--runtime-root"));
        assert_eq!(
            id(&held, "zzz", Accept::IdPrefixOrName),
            Err(Miss::NotFound)
        );
        assert_eq!(id(&held, "", Accept::IdPrefixOrName), Err(Miss::NotFound));
        // the whole id only: neither a name nor a prefix names anything
        assert_eq!(id(&held, "web", Accept::Id), Err(Miss::NotFound));
        assert_eq!(id(&held, "abd", Accept::Id), Err(Miss::NotFound));
        assert_eq!(id(&held, "abd456", Accept::Id).unwrap(), "abd456");
    }

    #[test]
    fn two_containers_of_one_name_and_one_id_under_two_roots() {
        let held = vec![
            res("aaa", None, Some("web")),
            res("bbb", None, Some("web")),
            res("aaa", Some("/run/other"), None),
        ];
        let m = ambiguous(id(&held, "web", Accept::IdPrefixOrName));
        assert!(m.contains("name of 2 containers") && m.contains("give the id"));
        let m = ambiguous(id(&held, "aaa", Accept::IdPrefixOrName));
        assert!(
            m.contains("--runtime-root") && m.contains("/run/other") && m.contains("default"),
            "{m}"
        );
        let r = find(
            &held,
            "aaa",
            Some("/run/other"),
            Accept::IdPrefixOrName,
            &|_| true,
        )
        .unwrap();
        assert_eq!(r.runtime_root.as_deref(), Some("/run/other"));
        // what `keep` refuses is not there
        assert_eq!(
            find(&held, "bbb", None, Accept::IdPrefixOrName, &|_| false),
            Err(Miss::NotFound)
        );
    }
}

//! The ledger's container operations: admission (it lists the boot's
//! record names and writes one record; a refusal, a stale duplicate or an
//! earlier boot's id goes through the whole ledger), the hook's confirmation
//! (its own record, found by the runtime's hint or by listing) and the
//! release. The storage they share (lock, ledger.json, records) is the
//! parent module's.
use super::*;

impl Ledger {
    /// Admission: place `req` and record it, atomically with respect to
    /// every other admission on this host.
    /// Reservations of dead containers reclaimed on the way are appended to
    /// `reclaimed` (also when the admission is refused), so the caller can
    /// remove their state.
    #[allow(clippy::too_many_arguments)]
    pub fn admit(
        &self,
        cfg: &Config,
        inv: &Inventory,
        req: &Request,
        id: &str,
        root: Option<&str>,
        bundle: &str,
        reclaimed: &mut Vec<Reservation>,
    ) -> Result<Reservation, LedgerError> {
        self.admit_knowing(
            cfg,
            inv,
            &AdmitInfo::default(),
            req,
            id,
            root,
            bundle,
            reclaimed,
        )
    }

    /// [`Ledger::admit`] knowing more ([`AdmitInfo`]): a slice that cannot
    /// hold a context of known cost is refused; the workload is recorded.
    #[allow(clippy::too_many_arguments)]
    pub fn admit_knowing(
        &self,
        cfg: &Config,
        inv: &Inventory,
        info: &AdmitInfo,
        req: &Request,
        id: &str,
        root: Option<&str>,
        bundle: &str,
        reclaimed: &mut Vec<Reservation>,
    ) -> Result<Reservation, LedgerError> {
        // a new share must say which host user MPS will see, and it is not
        // root unless the operator trusts every tenant (a running share's
        // resize keeps the user it was admitted with)
        let refuse = |err| {
            Err(LedgerError::Refused {
                id: id.into(),
                err: Box::new(err),
            })
        };
        if let Some(err) = req.sm.and_then(|_| {
            Placer::share_user_refusal(req.user, cfg.mps_root_shares, || req.origin.to_string())
        }) {
            return refuse(err);
        }
        let placer = Placer::new(cfg, inv, &info.contexts);
        let reservation = |slices| Reservation {
            workload: info.workload.clone(),
            ..Reservation::new(id, root, bundle, slices, describe_request(req)).admitted_now()
        };
        if let Some(r) = self.admit_record(&placer, req, id, root, &reservation)? {
            return Ok(r);
        }
        // Whole-ledger: a refusal (after reclaiming what dead containers
        // hold), replacing a stale reservation of the same container, or
        // no record for it.
        self.transact(|d| {
            // any live one of this key (a stale copy listed first must not
            // hide a live one, which the retain below would drop)
            let now = fsutil::now_unix();
            if let Some(r) = d
                .reservations
                .iter()
                .find(|r| Key::Root { id, root }.matches(r) && !self.is_stale(r, now))
            {
                return Err(LedgerError::Duplicate {
                    id: id.into(),
                    slices: describe_slices(&r.slices),
                });
            }
            let slices = match placer.place(req, &d.usage()) {
                Ok(s) => s,
                Err(_) => {
                    // Before refusing, reclaim what dead containers still hold.
                    let gone = self.reclaim(d);
                    let changed = !gone.is_empty();
                    reclaimed.extend(gone);
                    match placer.place(req, &d.usage()) {
                        Ok(s) => s,
                        Err(err) => {
                            if changed {
                                // keep the reclaim; the refusal is reported after the write
                                return Ok((
                                    Err(LedgerError::Refused {
                                        id: id.into(),
                                        err: Box::new(err),
                                    }),
                                    true,
                                ));
                            }
                            return Err(LedgerError::Refused {
                                id: id.into(),
                                err: Box::new(err),
                            });
                        }
                    }
                }
            };
            d.reservations
                .retain(|r| !Key::Root { id, root }.matches(r));
            let r = reservation(slices);
            d.reservations.push(r.clone());
            Ok((Ok(r), true))
        })?
    }

    /// Admission that fits, as one new record: reads ledger.json (claims,
    /// and what whole-ledger transactions added) and this boot's record
    /// names, checks that no live reservation of this container exists,
    /// places, writes the record. `None`: the whole-ledger path decides
    /// (no fit, a stale reservation to replace, no boot id, a name too
    /// long).
    fn admit_record(
        &self,
        placer: &Placer<'_>,
        req: &Request,
        id: &str,
        root: Option<&str>,
        reservation: &dyn Fn(Vec<Slice>) -> Reservation,
    ) -> Result<Option<Reservation>, LedgerError> {
        let Some(bdir) = self.boot_dir() else {
            return Ok(None);
        };
        let (_g, dirs) = self.lock()?;
        // made (0700) and checked (never a symlink, ours, not writable by
        // others) before it is listed or written
        fsutil::secure_dir(&bdir, 0o700).map_err(self.io(&bdir))?;
        let had_json = self.path().exists();
        let json = self.load_unlocked(true)?;
        let names = self.list_records(&bdir, true)?;
        if duplicates::duplicated(&names, &json) {
            // a container a crash left held twice: counted once, by the
            // whole-ledger path, which also writes it back once
            return Ok(None);
        }
        let key = Key::Root { id, root };
        let now = fsutil::now_unix();
        let mut same = json.reservations.iter().find(|r| key.matches(r)).cloned();
        let h = records::key_hash(id, root);
        for (dir, current) in dirs {
            // an earlier boot's reservation of this container (its id reused
            // after a reboot): the whole-ledger path replaces it
            if !current && self.list_records(&dir, true)?.iter().any(|n| n.key == h) {
                return Ok(None);
            }
        }
        for n in names.iter().filter(|n| n.key == h) {
            if same.is_some() {
                break;
            }
            same = self
                .read_record(&bdir.join(&n.file), true, false)?
                .filter(|r| key.matches(r));
        }
        if let Some(r) = same {
            if !self.is_stale(&r, now) {
                return Err(LedgerError::Duplicate {
                    id: id.into(),
                    slices: describe_slices(&r.slices),
                });
            }
            return Ok(None);
        }
        let mut usage = json.usage();
        records::add_usage(
            &mut usage,
            &names,
            placer.inventory.gpus.iter().map(|g| g.uuid.as_str()),
        );
        let Ok(slices) = placer.place(req, &usage) else {
            return Ok(None);
        };
        let r = reservation(slices);
        let Some(name) = records::name_of(&r) else {
            return Ok(None);
        };
        if !had_json || json.version < SCHEMA_VERSION {
            // before the first record: a release that knows only
            // ledger.json now refuses (too new) instead of admitting past it
            let marked = LedgerData {
                version: SCHEMA_VERSION,
                ..json
            };
            self.write_json(&marked, true, &mut |_| {})?;
        }
        self.write_record(&bdir.join(name), &r, &mut |_| {})?;
        Ok(Some(r))
    }

    /// The hook confirms the reservation of container `id` created under
    /// runc root `root` from `bundle` with the container's process.
    ///
    /// A reservation kept as a record: that record is rewritten (temp file,
    /// names exchanged, `fsutil::replace_atomic`) without fsync, nothing
    /// else read (with the runtime's hint, not even the list of records). One kept in ledger.json:
    /// ledger.json is rewritten with the file fsync'd before the rename but
    /// without the directory fsync after it. Either way a power failure
    /// that undoes the write also ends the container (a new boot makes
    /// every reservation stale, see `is_stale`), so the confirmation is
    /// never needed after one, while ledger.json must still never be torn.
    /// A reservation of another boot is never confirmed.
    pub fn confirm(
        &self,
        id: &str,
        root: Option<&str>,
        bundle: &str,
        pid: u32,
    ) -> Result<Reservation, LedgerError> {
        self.confirm_observed(id, root, bundle, pid, &mut |_| {})
    }

    pub fn confirm_observed(
        &self,
        id: &str,
        root: Option<&str>,
        bundle: &str,
        pid: u32,
        observe: &mut dyn FnMut(WriteStep),
    ) -> Result<Reservation, LedgerError> {
        self.confirm_hinted(id, root, bundle, pid, None, observe)
    }

    /// As [`Ledger::confirm`], trying the record file named by `hint` (the
    /// name the runtime put into config.json) before listing the records:
    /// a start then reads no directory that grows with the number of
    /// containers. A hint that is not a record name of this key, or names no
    /// record of this container, only costs the listing.
    pub fn confirm_hinted(
        &self,
        id: &str,
        root: Option<&str>,
        bundle: &str,
        pid: u32,
        hint: Option<&str>,
        observe: &mut dyn FnMut(WriteStep),
    ) -> Result<Reservation, LedgerError> {
        let start = fsutil::process_start_time(pid);
        let key = Key::Hook { id, root, bundle };
        let confirm = |r: &mut Reservation| {
            r.pid = Some(pid);
            r.pid_start = start;
            r.state = ResState::Running;
            r.pid_ns = fsutil::namespace_id("pid");
            r.mnt_ns = fsutil::namespace_id("mnt");
            r.boot_id = fsutil::boot_id();
            r.started_unix = Some(fsutil::now_unix());
        };
        if let Some(bdir) = self.boot_dir() {
            // its record: the only file read or written
            let (_g, _) = self.lock()?;
            let h = records::key_hash(id, root);
            // a hint is a record name of this key, no longer than a name
            // can be, in a boot directory that is a real directory (the
            // listing checks that too)
            let real_dir = std::fs::symlink_metadata(&bdir).is_ok_and(|m| m.is_dir());
            let hinted = hint
                .filter(|f| f.len() <= records::MAX_NAME && real_dir)
                .and_then(records::parse_name)
                .filter(|n| n.key == h && n.file == hint.unwrap_or_default())
                .map(|n| n.file);
            // one record, confirmed when it is this container's; whatever
            // the hinted file is, it only costs the listing
            let mut confirm_in = |file: &str, hinted: bool| {
                let path = bdir.join(file);
                let read = match self.read_record(&path, true, false) {
                    Err(_) if hinted => None,
                    r => r?,
                };
                let Some(mut r) = read.filter(|r| key.matches(r)) else {
                    return Ok(None);
                };
                confirm(&mut r);
                self.write_record(&path, &r, observe)?;
                Ok::<_, LedgerError>(Some(r))
            };
            if let Some(f) = &hinted {
                if let Some(r) = confirm_in(f, true)? {
                    return Ok(r);
                }
            }
            for n in self.list_records(&bdir, true)? {
                if n.key == h && Some(&n.file) != hinted.as_ref() {
                    if let Some(r) = confirm_in(&n.file, false)? {
                        return Ok(r);
                    }
                }
            }
        }
        // (a reservation of another boot is gone: never confirmed again)
        let boot = fsutil::boot_id();
        let this_boot =
            |r: &Reservation| r.boot_id.is_none() || boot.is_none() || r.boot_id == boot;
        self.transact_steps(
            |d| {
                let Some(r) = d
                    .reservations
                    .iter_mut()
                    .find(|r| key.matches(r) && this_boot(r))
                else {
                    return Err(LedgerError::NoReservation {
                        id: id.into(),
                        root: root.unwrap_or("(runc's default)").into(),
                        bundle: bundle.into(),
                    });
                };
                confirm(r);
                Ok((r.clone(), true))
            },
            false,
            observe,
        )
    }

    /// Release; idempotent (releasing twice, or something never admitted,
    /// is not an error). Returns what was released.
    /// Reads ledger.json and the records named for this container, in
    /// every boot's directory; writes ledger.json only if it held one.
    pub fn release(&self, key: Key<'_>) -> Result<Vec<Reservation>, LedgerError> {
        let (_g, dirs) = self.lock()?;
        let json = self.load_unlocked(true)?;
        let (id, root) = key.id_root();
        let h = records::key_hash(id, root);
        let mut gone = vec![];
        let mut doomed = vec![];
        for (dir, current) in dirs {
            for n in self.list_records(&dir, true)?.iter().filter(|n| n.key == h) {
                let path = dir.join(&n.file);
                if let Some(r) = self
                    .read_record(&path, current, true)?
                    .filter(|r| key.matches(r))
                {
                    gone.push(r);
                    doomed.push(path);
                }
            }
        }
        let (in_json, keep): (Vec<_>, Vec<_>) =
            json.reservations.into_iter().partition(|r| key.matches(r));
        if !in_json.is_empty() {
            let data = LedgerData {
                version: SCHEMA_VERSION,
                reservations: keep,
            };
            self.write_json(&data, true, &mut |_| {})?;
        }
        for p in doomed {
            std::fs::remove_file(&p).map_err(self.io(&p))?;
        }
        gone.extend(in_json);
        Ok(gone)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{adm, record_files, setup};
    use super::*;
    const G: u64 = 1 << 30;

    #[test]
    fn the_hooks_record_hint_is_checked_and_a_wrong_one_costs_only_the_listing() {
        let (_d, cfg, inv) = setup();
        let l = Ledger::new(&cfg);
        let a = adm(&l, &cfg, &inv, G, Some(0), "a", Some("/r")).unwrap();
        let b = adm(&l, &cfg, &inv, G, Some(1), "b", Some("/r")).unwrap();
        let (fa, fb) = (records::name_of(&a).unwrap(), records::name_of(&b).unwrap());
        assert_eq!(record_files(&l).len(), 2);
        // every hint confirms a's own reservation and nothing else: its own
        // name, another container's, a path out of the directory, a name of
        // a's key that is not there, garbage, none
        let own_key_gone = fa.replace(&format!("x{:x}", G), &format!("x{:x}", 2 * G));
        assert_ne!(own_key_gone, fa);
        // a name of a's key too long for the file system (ENAMETOOLONG)
        let too_long = format!("{}{}", &fa[..20], ".00000000x0".repeat(30));
        assert_eq!(
            records::parse_name(&too_long).map(|n| n.key),
            Some(records::key_hash("a", Some("/r")))
        );
        for hint in [
            Some(fa.as_str()),
            Some(fb.as_str()),
            Some("../ledger.json"),
            Some(own_key_gone.as_str()),
            Some(too_long.as_str()),
            Some("r-zz"),
            None,
        ] {
            let r = l
                .confirm_hinted(
                    "a",
                    Some("/r"),
                    "/b/a",
                    std::process::id(),
                    hint,
                    &mut |_| {},
                )
                .unwrap_or_else(|e| panic!("hint {hint:?}: {e}"));
            assert_eq!(r.container_id, "a", "hint {hint:?}");
            assert_eq!(r.pid, Some(std::process::id()));
        }
        let all = l.read().unwrap().reservations;
        let b_now = all.iter().find(|r| r.container_id == "b").unwrap();
        assert_eq!(b_now.pid, None, "b was never confirmed by a's hints");
        assert_eq!(record_files(&l), {
            let mut v = vec![fa, fb];
            v.sort();
            v
        });
    }

    /// The listing refuses a boot directory that is a symlink; the hint does
    /// not open a way around that.
    #[test]
    fn a_hint_does_not_follow_a_symlinked_boot_directory() {
        let (d, cfg, inv) = setup();
        let l = Ledger::new(&cfg);
        let a = adm(&l, &cfg, &inv, G, Some(0), "a", Some("/r")).unwrap();
        let fa = records::name_of(&a).unwrap();
        let bdir = l.boot_dir().unwrap();
        let elsewhere = d.path().join("elsewhere");
        std::fs::rename(&bdir, &elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &bdir).unwrap();
        let pid = std::process::id();
        let unhinted = l.confirm_hinted("a", Some("/r"), "/b/a", pid, None, &mut |_| {});
        let hinted = l.confirm_hinted("a", Some("/r"), "/b/a", pid, Some(&fa), &mut |_| {});
        assert!(unhinted.is_err(), "control: the listing refuses it");
        assert!(hinted.is_err(), "{hinted:?}");
        let r: Reservation =
            serde_json::from_slice(&std::fs::read(elsewhere.join(&fa)).unwrap()).unwrap();
        assert_eq!(r.pid, None, "nothing written through the link");
    }

    /// With the right hint the hook reads its record without listing the
    /// boot's records (the listing is what removes a crashed writer's temp
    /// file, so a planted one shows whether it ran).
    #[test]
    fn the_right_record_hint_spares_the_listing() {
        let (_d, cfg, inv) = setup();
        let l = Ledger::new(&cfg);
        let a = adm(&l, &cfg, &inv, G, Some(0), "a", Some("/r")).unwrap();
        let fa = records::name_of(&a).unwrap();
        let temp = l.boot_dir().unwrap().join(".r-0000000000000000-c.tmp.1");
        std::fs::write(&temp, b"{").unwrap();
        let pid = std::process::id();
        l.confirm_hinted("a", Some("/r"), "/b/a", pid, Some(&fa), &mut |_| {})
            .unwrap();
        assert!(temp.exists(), "confirmed without listing");
        l.confirm_hinted("a", Some("/r"), "/b/a", pid, None, &mut |_| {})
            .unwrap();
        assert!(
            !temp.exists(),
            "control: without a hint the records are listed"
        );
    }
}

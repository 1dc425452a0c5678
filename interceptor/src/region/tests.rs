use super::*;
fn init() -> HeaderInit<'static> {
    HeaderInit {
        flags: 0,
        limit: 100,
        ctx_overhead: 0,
        container_id: b"t",
        uuids: &[],
    }
}
#[test]
fn admit_release() {
    let r = Region::anonymous(&init()).unwrap();
    let a = r.claim_slot(1, 0, &|_| true).unwrap();
    let b = r.claim_slot(2, 0, &|_| true).unwrap();
    assert_ne!(a, b);
    assert!(r.try_admit(a, 0, 60, 100).is_ok());
    assert_eq!(r.try_admit(b, 0, 50, 100), Err(60));
    assert!(r.try_admit(b, 0, 40, 100).is_ok());
    assert_eq!(r.used(0), 100);
    assert_eq!(r.used(1), 0);
    r.release(a, 0, 60);
    assert_eq!(r.used(0), 40);
    r.release(a, 0, 1000); // saturates
    assert_eq!(r.used(0), 40);
    // dead owner reclaimed
    let n = r.reclaim_dead(usize::MAX, &|w| (w & 0xffffffff) != 2);
    assert_eq!(n, 1);
    assert_eq!(r.used(0), 0);
    let c = r.claim_slot(3, 7, &|_| true).unwrap();
    assert_eq!(c, b);
    assert_eq!(r.owner(c).load(SeqCst), owner_word(3, 7));
}
#[test]
fn exec_reclaims_own_word() {
    let r = Region::anonymous(&init()).unwrap();
    let a = r.claim_slot(42, 7, &|_| true).unwrap();
    r.charge(a, 0, 50);
    // the same process after exec: same pid and start time, new image
    let b = r.claim_slot(42, 7, &|_| true).unwrap();
    assert_eq!(r.used(0), 0, "the old image's charge must go");
    assert_eq!(r.owner(b).load(SeqCst), owner_word(42, 7));
    let other = r.claim_slot(43, 7, &|_| true).unwrap();
    r.charge(other, 0, 5);
    assert_eq!(r.reclaim_word(owner_word(42, 7)), 1);
    assert_eq!(r.used(0), 5);
}
#[test]
fn file_sizes_never_grown() {
    let dir = std::env::temp_dir().join(format!("gq-size-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("usage");
    let cp = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    for n in [
        1usize,
        100,
        TOTAL_SIZE - 1,
        TOTAL_SIZE + 1,
        TOTAL_SIZE + 4096,
    ] {
        std::fs::write(&p, vec![0u8; n]).unwrap();
        assert_eq!(
            Region::open_file(&cp, false, &init()).err(),
            Some(OpenError::Incompatible),
            "size {n}"
        );
        assert_eq!(std::fs::metadata(&p).unwrap().len() as usize, n);
    }
    // right size, zero magic: initialised in place
    std::fs::write(&p, vec![0u8; TOTAL_SIZE]).unwrap();
    assert!(Region::open_file(&cp, false, &init()).is_ok());
    std::fs::remove_dir_all(&dir).unwrap();
}
#[test]
fn a_slot_of_another_consumer_group_is_never_judged_by_pid() {
    // two containers of one claim share the file; pids of the other's
    // namespace mean nothing here
    let r = Region::anonymous(&init()).unwrap();
    // each group's process has its own description of the file its
    // slot locks live on (fail closed without one: no slot)
    let d = std::env::temp_dir().join(format!("gq-group-{}", std::process::id()));
    std::fs::write(&d, b"").unwrap();
    let open = || {
        let c = std::ffi::CString::new(d.to_str().unwrap()).unwrap();
        unsafe { libc::open(c.as_ptr(), libc::O_RDWR) }
    };
    let (fd7, fd9) = (open(), open());
    forget_live_fd();
    set_my_group(7);
    assert!(
        r.claim_slot(4242, 1, &|_| true).is_none(),
        "no lock, no slot"
    );
    set_live_fd(fd7);
    let a = r.claim_slot(4242, 1, &|_| true).unwrap();
    r.charge(a, 0, 1 << 30);
    forget_live_fd();
    set_live_fd(fd9);
    set_my_group(9);
    let b = r.claim_slot(4242, 1, &|_| true).unwrap();
    assert_ne!(
        a, b,
        "the same pid and start time in another group: its own slot"
    );
    r.charge(b, 0, 1 << 20);
    assert_eq!(
        r.reclaim_dead(usize::MAX, &|_| false),
        1,
        "only its own group's"
    );
    assert_eq!(r.used(0), 1 << 30, "group 7's usage stays");
    forget_live_fd();
    set_live_fd(fd7);
    set_my_group(7);
    assert_eq!(r.reclaim_dead(usize::MAX, &|_| false), 1);
    assert_eq!(r.used(0), 0);
    set_my_group(0);
    forget_live_fd();
    unsafe {
        libc::close(fd7);
        libc::close(fd9);
    }
    let _ = std::fs::remove_file(&d);
}

#[test]
fn another_groups_slot_is_dead_once_its_lock_is_gone() {
    // two consumers' processes: each its own open file description of
    // the one usage file (here two opens in one thread)
    let d = std::env::temp_dir().join(format!("gq-live-{}", std::process::id()));
    let _ = std::fs::remove_file(&d);
    std::fs::write(&d, b"").unwrap();
    let path = std::ffi::CString::new(d.to_str().unwrap()).unwrap();
    forget_live_fd();
    set_my_group(7);
    let a = Region::open_file(&path, false, &init()).ok().unwrap();
    let fd_a = live_fd();
    let sa = a.claim_slot(4242, 1, &|_| true).unwrap();
    a.charge(sa, 0, 1 << 30);
    forget_live_fd();
    set_my_group(9);
    let b = Region::open_file(&path, false, &init()).ok().unwrap();
    let fd_b = live_fd();
    assert_ne!(fd_a, fd_b);
    // group 7's process holds its lock: alive whatever its pid says here
    assert_eq!(b.reclaim_dead(usize::MAX, &|_| false), 0);
    assert_eq!(b.used(0), 1 << 30);
    // it is gone (its descriptor closed and its mapping, which holds
    // the description too, unmapped: a process exit does both): dead,
    // reclaimed by group 9
    unsafe {
        libc::close(fd_a);
        a.unmap();
    }
    assert_eq!(b.reclaim_dead(usize::MAX, &|_| true), 1);
    assert_eq!(b.used(0), 0);
    unsafe {
        libc::close(fd_b);
        b.unmap();
    }
    forget_live_fd();
    set_my_group(0);
    let _ = std::fs::remove_file(&d);
}

#[test]
fn zombie_is_dead() {
    let child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id() as i32;
    // not reaped yet: a zombie once it exited
    for _ in 0..500 {
        if crate::sys::proc_state_start(pid).0 == b'Z' {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(crate::sys::proc_state_start(pid).0, b'Z');
    assert!(!owner_alive(owner_word(pid, 0)));
    let mut child = child;
    child.wait().unwrap();
}
#[test]
fn uuids() {
    let u1 = [1u8; 16];
    let init = HeaderInit {
        flags: 0,
        limit: 1,
        ctx_overhead: 0,
        container_id: b"",
        uuids: &[u1],
    };
    let r = Region::anonymous(&init).unwrap();
    assert_eq!(r.uuid_index(&u1, false), Some(0));
    assert_eq!(r.uuid_index(&[2; 16], false), None);
    assert_eq!(r.uuid_index(&[2; 16], true), Some(1));
    assert_eq!(r.uuid_index(&[2; 16], true), Some(1));
}
#[test]
fn liveness() {
    let me = std::process::id() as i32;
    assert!(owner_alive(owner_word(me, crate::sys::proc_start_time(me))));
    assert!(!owner_alive(owner_word(
        me,
        crate::sys::proc_start_time(me) + 1
    )));
    let child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id() as i32;
    let mut child = child;
    child.wait().unwrap();
    assert!(!owner_alive(owner_word(pid, 0)));
}
#[test]
fn file_shared() {
    let dir = std::env::temp_dir().join(format!("gq-region-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("usage");
    std::fs::write(&p, b"").unwrap();
    let cp = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    let r1 = Region::open_file(&cp, false, &init()).unwrap();
    let r2 = Region::open_file(&cp, false, &init()).unwrap();
    assert_eq!(std::fs::metadata(&p).unwrap().len() as usize, TOTAL_SIZE);
    let s = r1.claim_slot(10, 0, &|_| true).unwrap();
    r1.charge(s, 3, 77);
    assert_eq!(r2.used(3), 77);
    assert_eq!(r2.limit(0), 100);
    std::fs::write(&p, b"garbage!garbage!").unwrap();
    assert_eq!(
        Region::open_file(&cp, false, &init()).err(),
        Some(OpenError::Incompatible)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

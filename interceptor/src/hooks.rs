//! Registries that let a low module run work owned by higher ones without
//! importing them: each bookkeeping module registers its own function the
//! first time it holds state, and the low module runs whatever is there.
//!
//! * [`FORK`]: what a fork child must forget (the parent's pointers, pools,
//!   captures, contexts); run from the one `pthread_atfork` child handler
//!   (the argument is [`ALL`], the answer ignored).
//! * [`GIVE_BACK`]: reserves that may have shrunk behind our back (pool and
//!   graph memory); asked before an allocation on a region device (the
//!   argument) is refused. Returns whether any charge went down.
//! * [`CAPTURE_END`]: work skipped while a stream capture was active
//!   (the capture module), done when the last one ends.
//!
//! Registration is a CAS into a fixed array (no allocation, no lock); a
//! registry is never emptied. Registering the same function twice is a
//! no-op, so callers may register on every first use they see.

use core::sync::atomic::{AtomicU8, AtomicUsize, Ordering::*};

const N: usize = 16;

/// A registered function: its argument and answer are the registry's.
pub type Hook = fn(usize) -> bool;

pub struct Registry {
    fns: [AtomicUsize; N],
}

impl Registry {
    pub const fn new() -> Self {
        Registry {
            fns: [const { AtomicUsize::new(0) }; N],
        }
    }

    /// Add `f` (once). False when the registry is full (a programming
    /// error: N is above the number of modules that register).
    pub fn register(&self, f: fn(usize) -> bool) -> bool {
        let v = f as usize;
        for s in self.fns.iter() {
            match s.compare_exchange(0, v, AcqRel, Acquire) {
                Ok(_) => return true,
                Err(cur) if cur == v => return true,
                Err(_) => {}
            }
        }
        false
    }

    /// Run every registered function with `arg`; true when any returned
    /// true.
    pub fn run(&self, arg: usize) -> bool {
        let mut any = false;
        for s in self.fns.iter() {
            let v = s.load(Acquire);
            if v == 0 {
                break;
            }
            // SAFETY: only `register` stores here, and only fn(usize) -> bool values
            let f: fn(usize) -> bool =
                unsafe { core::mem::transmute::<usize, fn(usize) -> bool>(v) };
            any |= f(arg);
        }
        any
    }
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

/// The argument meaning "every device".
pub const ALL: usize = usize::MAX;

/// What a fork child forgets (see the module comment).
pub static FORK: Registry = Registry::new();
/// Reserves to look at again before a refusal (see the module comment).
pub static GIVE_BACK: Registry = Registry::new();
/// Work deferred during stream capture (see the module comment).
pub static CAPTURE_END: Registry = Registry::new();

/// A bookkeeping module's first use: register its `hooks`, then set its
/// `flag` (Release), so that a thread that finds the flag set can rely on
/// them — a fork right after that thread's first use still resets the
/// child. The fast path is one load.
#[inline]
pub fn enlist(flag: &AtomicU8, hooks: &[(&Registry, Hook)]) {
    if flag.load(Acquire) == 0 {
        for (r, f) in hooks {
            r.register(*f);
        }
        flag.store(1, Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::sync::atomic::AtomicU32;
    static A: AtomicU32 = AtomicU32::new(0);
    static B: AtomicU32 = AtomicU32::new(0);
    fn a(x: usize) -> bool {
        A.fetch_add(x as u32, Relaxed);
        false
    }
    fn b(x: usize) -> bool {
        B.fetch_add(x as u32, Relaxed);
        true
    }
    /// Every registered function runs once per run, a repeated
    /// registration does not run it twice, and the answers are or'ed.
    #[test]
    fn runs_each_registered_function_once() {
        let r = Registry::new();
        assert!(!r.run(1));
        assert!(r.register(a) && r.register(a));
        assert!(!r.run(1));
        assert!(r.register(b));
        assert!(r.run(1));
        assert_eq!((A.load(Relaxed), B.load(Relaxed)), (2, 1));
    }
}

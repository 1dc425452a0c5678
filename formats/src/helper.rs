//! The command line between the host's programs (gpu-quota-runtime, the
//! hook, `gpu-quota`: core::helper's parent side) and their helper child
//! [`PROGRAM`] (hook/src/driver/), which loads the host's driver libraries.
//! Both sides build and read it here, so a flag cannot be renamed on one
//! side only: the parent writes `X::argv()`, the child reads `X::parse()`,
//! and the tests below read back every argv that is written.
//!
//! * `measure-context --cuda LIB --nvml LIB --uuid GPU-…` ([`Measure`])
//! * `driver-limits set --nvml LIB --cgroup DIR (--limit UUID=BYTES)…`
//!   ([`Set`], [`LimitArg`])
//! * `driver-limits clear --nvml LIB --record JSON` ([`Clear`])
//! * `nvml-inventory`
//! * `gpu-processes --nvml LIB --uuid GPU-…` ([`Processes`])
use core::fmt;

/// The helper's file name (installed beside the hook or in
/// `../lib/gpu-quota/`).
pub const PROGRAM: &str = "gpu-quota-driver";

macro_rules! spelled {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $v:ident = $s:literal,)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum $name { $($(#[$vm])* $v,)* }
        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$v,)*];
            /// The spelling on the command line.
            pub const fn name(self) -> &'static str {
                match self { $($name::$v => $s,)* }
            }
            pub fn parse(s: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|v| v.name() == s)
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

spelled! {
    /// The helper's first argument.
    Stage {
        /// Measure a CUDA context (core::ctxcost).
        MeasureContext = "measure-context",
        /// Set or clear the driver's per-process limits (core::drvlimit).
        DriverLimits = "driver-limits",
        /// Print NVML's inventory as one JSON line (core::inventory).
        NvmlInventory = "nvml-inventory",
        /// Print the processes NVML sees on one GPU, with their memory
        /// (core::procmem).
        GpuProcesses = "gpu-processes",
    }
}

spelled! {
    /// `driver-limits`'s second argument.
    Action {
        Set = "set",
        Clear = "clear",
    }
}

spelled! {
    /// The flags; each is followed by one value.
    Flag {
        Cuda = "--cuda",
        Nvml = "--nvml",
        Uuid = "--uuid",
        Cgroup = "--cgroup",
        Limit = "--limit",
        Record = "--record",
    }
}

/// What the child could not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgError {
    Missing(Flag),
    /// A `--limit` value that is not `UUID=BYTES`.
    BadLimit,
}

impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgError::Missing(flag) => write!(f, "missing {flag}"),
            ArgError::BadLimit => write!(f, "{} UUID=BYTES", Flag::Limit),
        }
    }
}

/// Every value that follows `flag` in `args`.
pub fn values<S: AsRef<str>>(args: &[S], flag: Flag) -> impl Iterator<Item = &str> {
    args.windows(2)
        .filter(move |w| w[0].as_ref() == flag.name())
        .map(|w| w[1].as_ref())
}

/// The first value that follows `flag` in `args`.
pub fn value<S: AsRef<str>>(args: &[S], flag: Flag) -> Result<&str, ArgError> {
    values(args, flag).next().ok_or(ArgError::Missing(flag))
}

/// `measure-context --cuda LIB --nvml LIB --uuid GPU-…`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Measure<'a> {
    pub cuda: &'a str,
    pub nvml: &'a str,
    pub uuid: &'a str,
}

impl<'a> Measure<'a> {
    /// The whole argv after the program.
    pub fn argv(&self) -> [&'a str; 7] {
        [
            Stage::MeasureContext.name(),
            Flag::Cuda.name(),
            self.cuda,
            Flag::Nvml.name(),
            self.nvml,
            Flag::Uuid.name(),
            self.uuid,
        ]
    }
    /// From the arguments after the stage.
    pub fn parse<S: AsRef<str>>(rest: &'a [S]) -> Result<Self, ArgError> {
        Ok(Measure {
            cuda: value(rest, Flag::Cuda)?,
            nvml: value(rest, Flag::Nvml)?,
            uuid: value(rest, Flag::Uuid)?,
        })
    }
}

/// `gpu-processes --nvml LIB --uuid GPU-…`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Processes<'a> {
    pub nvml: &'a str,
    pub uuid: &'a str,
}

impl<'a> Processes<'a> {
    /// The whole argv after the program.
    pub fn argv(&self) -> [&'a str; 5] {
        [
            Stage::GpuProcesses.name(),
            Flag::Nvml.name(),
            self.nvml,
            Flag::Uuid.name(),
            self.uuid,
        ]
    }
    /// From the arguments after the stage.
    pub fn parse<S: AsRef<str>>(rest: &'a [S]) -> Result<Self, ArgError> {
        Ok(Processes {
            nvml: value(rest, Flag::Nvml)?,
            uuid: value(rest, Flag::Uuid)?,
        })
    }
}

/// `driver-limits set --nvml LIB --cgroup DIR`, followed by one
/// `--limit` [`LimitArg`] per GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Set<'a> {
    pub nvml: &'a str,
    pub cgroup: &'a str,
}

impl<'a> Set<'a> {
    /// The argv after the program, without the limits.
    pub fn argv(&self) -> [&'a str; 6] {
        [
            Stage::DriverLimits.name(),
            Action::Set.name(),
            Flag::Nvml.name(),
            self.nvml,
            Flag::Cgroup.name(),
            self.cgroup,
        ]
    }
    /// From the arguments after the stage (the action first).
    pub fn parse<S: AsRef<str>>(rest: &'a [S]) -> Result<Self, ArgError> {
        Ok(Set {
            nvml: value(rest, Flag::Nvml)?,
            cgroup: value(rest, Flag::Cgroup)?,
        })
    }
    /// The limits of the arguments after the stage.
    pub fn limits<S: AsRef<str>>(
        rest: &'a [S],
    ) -> impl Iterator<Item = Result<LimitArg<'a>, ArgError>> {
        values(rest, Flag::Limit).map(LimitArg::parse)
    }
}

/// A `--limit` value: `UUID=BYTES`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitArg<'a> {
    pub uuid: &'a str,
    pub bytes: u64,
}

impl<'a> LimitArg<'a> {
    pub fn parse(v: &'a str) -> Result<Self, ArgError> {
        let (uuid, bytes) = v.split_once('=').ok_or(ArgError::BadLimit)?;
        Ok(LimitArg {
            uuid,
            bytes: bytes.parse().map_err(|_| ArgError::BadLimit)?,
        })
    }
}

impl fmt::Display for LimitArg<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.uuid, self.bytes)
    }
}

/// `driver-limits clear --nvml LIB --record JSON`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clear<'a> {
    pub nvml: &'a str,
    pub record: &'a str,
}

impl<'a> Clear<'a> {
    /// The whole argv after the program.
    pub fn argv(&self) -> [&'a str; 6] {
        [
            Stage::DriverLimits.name(),
            Action::Clear.name(),
            Flag::Nvml.name(),
            self.nvml,
            Flag::Record.name(),
            self.record,
        ]
    }
    /// From the arguments after the stage (the action first).
    pub fn parse<S: AsRef<str>>(rest: &'a [S]) -> Result<Self, ArgError> {
        Ok(Clear {
            nvml: value(rest, Flag::Nvml)?,
            record: value(rest, Flag::Record)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;
    use std::vec::Vec;

    #[test]
    fn spellings_are_distinct_and_parse_back() {
        let names: Vec<&str> = Stage::ALL
            .iter()
            .map(|s| s.name())
            .chain(Action::ALL.iter().map(|a| a.name()))
            .chain(Flag::ALL.iter().map(|f| f.name()))
            .collect();
        for (i, n) in names.iter().enumerate() {
            assert!(!names[..i].contains(n), "{n} twice");
        }
        for s in Stage::ALL {
            assert_eq!(Stage::parse(s.name()), Some(*s));
        }
        for f in Flag::ALL {
            assert!(f.name().starts_with("--"));
            assert_eq!(Flag::parse(f.name()), Some(*f));
        }
        assert_eq!(Stage::parse("--help"), None);
    }

    #[test]
    fn what_the_parent_writes_the_child_reads() {
        let m = Measure {
            cuda: "/l/libcuda.so.1",
            nvml: "/l/libnvidia-ml.so.1",
            uuid: "GPU-1",
        };
        let a = m.argv();
        assert_eq!(Stage::parse(a[0]), Some(Stage::MeasureContext));
        assert_eq!(Measure::parse(&a[1..]), Ok(m));

        let s = Set {
            nvml: "/l/nv",
            cgroup: "/sys/fs/cgroup/x",
        };
        let limits = [("GPU-a", 1u64 << 30), ("GPU-b", u64::MAX)];
        let shown: Vec<_> = limits
            .iter()
            .map(|(u, b)| LimitArg { uuid: u, bytes: *b }.to_string())
            .collect();
        let mut a: Vec<&str> = s.argv().to_vec();
        for l in &shown {
            a.extend([Flag::Limit.name(), l.as_str()]);
        }
        assert_eq!(Stage::parse(a[0]), Some(Stage::DriverLimits));
        assert_eq!(Action::parse(a[1]), Some(Action::Set));
        assert_eq!(Set::parse(&a[1..]), Ok(s));
        let back: Vec<_> = Set::limits(&a[1..]).map(Result::unwrap).collect();
        assert_eq!(
            back,
            limits
                .map(|(uuid, bytes)| LimitArg { uuid, bytes })
                .to_vec()
        );

        let p = Processes {
            nvml: "/l/nv",
            uuid: "GPU-1",
        };
        let a = p.argv();
        assert_eq!(Stage::parse(a[0]), Some(Stage::GpuProcesses));
        assert_eq!(Processes::parse(&a[1..]), Ok(p));

        let c = Clear {
            nvml: "/l/nv",
            record: "{\"gpus\":[]}",
        };
        let a = c.argv();
        assert_eq!(Action::parse(a[1]), Some(Action::Clear));
        assert_eq!(Clear::parse(&a[1..]), Ok(c));
    }

    #[test]
    fn the_child_names_what_is_missing() {
        let a = ["set", "--nvml", "/n"];
        assert_eq!(Set::parse(&a), Err(ArgError::Missing(Flag::Cgroup)));
        assert_eq!(
            ArgError::Missing(Flag::Cgroup).to_string(),
            "missing --cgroup"
        );
        let a = ["set", "--limit", "GPU-a"];
        assert_eq!(Set::limits(&a).next(), Some(Err(ArgError::BadLimit)));
        let a = ["set", "--limit", "GPU-a=x"];
        assert_eq!(Set::limits(&a).next(), Some(Err(ArgError::BadLimit)));
    }
}

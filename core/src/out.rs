//! What the binaries print on stdout. `gpu-quota ls | head -3` closes the
//! pipe early, and `println!` then panics ("failed printing to stdout:
//! Broken pipe", exit 101). Everything the binaries print goes through
//! [`outln!`](crate::outln) / [`out!`](crate::out): a closed stdout (EPIPE)
//! ends the process quietly with status 0, as coreutils do; any other write
//! error is one line on stderr and status 1.
//!
//! SIGPIPE is deliberately left ignored (Rust's default) rather than
//! restored to SIG_DFL: the metrics exporter and the device plugin write to
//! sockets whose peer may go away, and that must stay an error to handle,
//! not the end of the daemon.
use std::io::{self, Write};

/// Write `args` to stdout and flush; see the module's text for errors.
pub fn write(args: std::fmt::Arguments<'_>) {
    let mut o = io::stdout().lock();
    if let Err(e) = o.write_fmt(args).and_then(|()| o.flush()) {
        drop(o);
        let (code, msg) = on_error(&e);
        if let Some(m) = msg {
            eprintln!("{m}");
        }
        std::process::exit(code);
    }
}

/// The exit status for a failed write to stdout, and what to say on stderr.
pub fn on_error(e: &io::Error) -> (i32, Option<String>) {
    if e.kind() == io::ErrorKind::BrokenPipe {
        (0, None)
    } else {
        (
            1,
            Some(format!("gpu-quota: cannot write to standard output: {e}")),
        )
    }
}

/// `println!` that ends the process quietly when stdout is closed.
#[macro_export]
macro_rules! outln {
    () => {
        $crate::out::write(format_args!("\n"))
    };
    ($($t:tt)*) => {
        $crate::out::write(format_args!("{}\n", format_args!($($t)*)))
    };
}

/// `print!` that ends the process quietly when stdout is closed.
#[macro_export]
macro_rules! out {
    ($($t:tt)*) => {
        $crate::out::write(format_args!($($t)*))
    };
}

/// The log of the long-running services (the device plugin, the DRA
/// driver): plain lines on stderr, as `kubectl logs` shows them, filtered
/// by `GPU_QUOTA_LOG` (an `EnvFilter`; default `info`).
pub fn init_service_log() {
    tracing_subscriber::fmt()
        .with_ansi(false)
        .with_target(false)
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("GPU_QUOTA_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epipe_is_quiet_success_other_errors_are_said() {
        assert_eq!(
            on_error(&io::Error::from_raw_os_error(libc::EPIPE)),
            (0, None)
        );
        let (code, msg) = on_error(&io::Error::from_raw_os_error(libc::ENOSPC));
        assert_eq!(code, 1);
        assert!(
            msg.as_deref()
                .is_some_and(|m| m.starts_with("gpu-quota: cannot write to standard output")),
            "{msg:?}"
        );
    }
}

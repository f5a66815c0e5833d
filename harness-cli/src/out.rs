//! Output that outlives its reader: `harness analyze FILE | head -1` closes
//! the pipe while `harness` still writes, and Rust's `println!` panics on
//! that. Every line the command line prints goes through here instead.

use std::fmt;
use std::io::{self, Write};
use std::process;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether stdout's reader has gone (a closed pipe): nothing more is
/// written to it.
static STDOUT_GONE: AtomicBool = AtomicBool::new(false);

/// Writes to stdout. Once its reader has gone (a closed pipe), which asked
/// for no more, nothing more is written, quietly, and the command goes on
/// to its end and its status: `harness run f.py | head -1` still exits 1
/// when a later cell fails (an exit at the closed pipe said 0). Any other
/// failure to write (a full disk) ends it with a message and status 2.
pub(crate) fn stdout(text: fmt::Arguments<'_>) {
    if STDOUT_GONE.load(Ordering::Relaxed) {
        return;
    }
    let mut out = io::stdout().lock();
    if let Err(e) = out.write_fmt(text).and_then(|()| out.flush()) {
        if e.kind() == io::ErrorKind::BrokenPipe {
            STDOUT_GONE.store(true, Ordering::Relaxed);
            return;
        }
        stderr(format_args!("harness: cannot write to stdout: {e}\n"));
        process::exit(2);
    }
}

/// Writes to stderr; a failure is ignored, as there is nowhere left to
/// report it.
pub(crate) fn stderr(text: fmt::Arguments<'_>) {
    let _ = io::stderr().lock().write_fmt(text);
}

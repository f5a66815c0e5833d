//! Output that outlives its reader: `harness analyze FILE | head -1` closes
//! the pipe while `harness` still writes, and Rust's `println!` panics on
//! that. Every line the command line prints goes through here instead.

use std::fmt;
use std::io::{self, Write};
use std::process;

/// Writes to stdout. A reader that has gone (a closed pipe) ends the
/// process quietly with status 0, as it asked for no more; any other
/// failure to write (a full disk) ends it with a message and status 2.
pub(crate) fn stdout(text: fmt::Arguments<'_>) {
    let mut out = io::stdout().lock();
    if let Err(e) = out.write_fmt(text).and_then(|()| out.flush()) {
        if e.kind() == io::ErrorKind::BrokenPipe {
            process::exit(0);
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

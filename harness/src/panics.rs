//! Caught panics: what they say.

/// The message of a caught panic, if it has one (`panic!` with a literal or
/// a format gives one).
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> Option<&str> {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
}

/// `f`, user code the loop calls; a panic in it is an error saying that
/// `what` panicked, with the panic's message (redacted) when it has one.
pub(crate) fn caught<T>(what: &str, f: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|panic| said(what, &*panic))
}

/// "`what` panicked", with the panic's message (redacted) when it has one.
pub(crate) fn said(what: &str, panic: &(dyn std::any::Any + Send)) -> String {
    match panic_message(panic) {
        Some(message) => format!("{what} panicked: {}", crate::secrets::redact(message)),
        None => format!("{what} panicked"),
    }
}

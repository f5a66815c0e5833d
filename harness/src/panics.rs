//! Caught panics: what they say.

/// The message of a caught panic, if it has one (`panic!` with a literal or
/// a format gives one).
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> Option<&str> {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
}

//! The `assistant` example, run as a new user would.

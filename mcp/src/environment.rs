//! The environment a stdio server's process gets: [`PASS_ENV`], the host
//! variables the application names ([`McpOptions::pass_env`]) and the
//! variables set on its command; the host's whole environment only when
//! the application asks for it ([`McpOptions::inherit_env`]).
//!
//! [`PASS_ENV`]: crate::PASS_ENV
//! [`McpOptions::pass_env`]: crate::McpOptions::pass_env
//! [`McpOptions::inherit_env`]: crate::McpOptions::inherit_env

use std::ffi::{OsStr, OsString};

use crate::{McpOptions, PASS_ENV};

/// Why `name`, given to [`McpOptions::pass_env`](crate::McpOptions::pass_env),
/// cannot name an environment variable, if it cannot.
fn name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("it is empty")
    } else if name.contains('=') {
        Some("it has a `=`")
    } else if name.contains('\0') {
        Some("it has a NUL byte")
    } else {
        None
    }
}

/// Sets the environment of `command` as `options` say: unless
/// [`McpOptions::inherit_env`](crate::McpOptions::inherit_env), it is
/// cleared, then given those of [`PASS_ENV`] and of
/// [`McpOptions::pass_env`](crate::McpOptions::pass_env) the host has, then
/// the variables set on `command` before (which win; one removed with
/// `env_remove` stays removed). Fails, changing nothing, if a name in
/// `pass_env` cannot be a variable's name.
pub(crate) fn confine(
    command: &mut tokio::process::Command,
    options: &McpOptions,
) -> Result<(), String> {
    if let Some((name, problem)) = options
        .pass_env
        .iter()
        .find_map(|name| name_problem(name).map(|problem| (name, problem)))
    {
        return Err(format!(
            "McpOptions::pass_env names {name:?}, which cannot be an environment variable's name: {problem}"
        ));
    }
    if options.inherit_env {
        return Ok(());
    }
    let set: Vec<(OsString, Option<OsString>)> = command
        .as_std()
        .get_envs()
        .map(|(name, value)| (name.to_owned(), value.map(OsStr::to_owned)))
        .collect();
    command.env_clear();
    let allowed = PASS_ENV
        .iter()
        .copied()
        .chain(options.pass_env.iter().map(String::as_str));
    for name in allowed {
        if set.iter().any(|(set_name, _)| set_name == name) {
            continue;
        }
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    for (name, value) in set {
        if let Some(value) = value {
            command.env(name, value);
        }
    }
    Ok(())
}

//! `harness studio --store PATH|URL`: the read-only web studio of
//! [`harness_studio`] on any session store, opened as `harness sessions`
//! opens it.

use std::net::{Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use harness_studio::{Studio, StudioError};

use crate::sessions::SessionsError;

/// Arguments of `harness studio`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The store: a sled database directory, a log-store directory, a
    /// file-store directory, or a `postgres://…` or `redis://…` URL (when
    /// built with the `postgres` or `redis` feature). A sled database is
    /// read from a private copy made when the studio starts, a log store
    /// from its log as it was when the studio started; neither changes a
    /// byte of the store, and a damaged one is refused, naming the file and
    /// the offset.
    #[arg(long, value_name = "PATH|URL")]
    store: String,
    /// The PostgreSQL schema holding the sessions (default `harness`).
    #[arg(long, value_name = "NAME")]
    schema: Option<String>,
    /// The Redis key prefix of the sessions (default `harness`).
    #[arg(long, value_name = "NAME")]
    prefix: Option<String>,
    /// The port on 127.0.0.1 (default: any free port).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// How often the page's live view looks at the store, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 500)]
    poll_ms: u64,
}

/// Why `harness studio` stopped.
#[derive(Debug, thiserror::Error)]
enum Error {
    #[error(transparent)]
    Store(#[from] SessionsError),
    #[error(transparent)]
    Studio(#[from] StudioError),
}

pub(crate) fn run(args: &Args) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            errln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            errln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: &Args) -> Result<(), Error> {
    let store =
        crate::sessions::open(&args.store, args.schema.as_deref(), args.prefix.as_deref()).await?;
    let serving = Studio::read_only(Arc::from(store))
        .poll_interval(Duration::from_millis(args.poll_ms.max(50)))
        .bind(SocketAddr::from((Ipv4Addr::LOCALHOST, args.port)))
        .await?;
    outln!("harness studio: {} (read-only)", args.store);
    outln!("open {}", serving.url());
    outln!("(the token in the URL is needed; stop with Ctrl-C)");
    serving.wait().await?;
    Ok(())
}

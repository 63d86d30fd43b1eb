//! Graceful shutdown: the first SIGINT/SIGTERM stops accepting connections and lets the requests
//! already accepted finish; a second signal, or a stuck connection past the grace period, exits.

use std::time::Duration;

/// How long accepted requests may take to finish after the first signal.
const GRACE: Duration = Duration::from_secs(120);

/// Signal listeners, registered when created (before the server announces itself) so that an
/// early SIGTERM is not handled by the default action.
pub struct Shutdown {
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
}

impl Shutdown {
    /// Registers the handlers; needs a running tokio runtime.
    pub fn register() -> std::io::Result<Shutdown> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(Shutdown {
                int: signal(SignalKind::interrupt())?,
                term: signal(SignalKind::terminate())?,
            })
        }
        #[cfg(not(unix))]
        Ok(Shutdown {})
    }

    /// Resolves on the first signal; from then on a second signal or the grace period ends the
    /// process.
    pub async fn requested(mut self) {
        let name = self.next().await;
        tracing::info!(
            "{name} received: finishing the requests in flight, accepting no new ones (send it again to exit at once)"
        );
        tokio::spawn(async move {
            tokio::select! {
                name = self.next() => {
                    tracing::warn!("second {name}: exiting now");
                    std::process::exit(130);
                }
                _ = tokio::time::sleep(GRACE) => {
                    tracing::warn!("requests still open {}s after the shutdown signal: exiting", GRACE.as_secs());
                    std::process::exit(1);
                }
            }
        });
    }

    #[cfg(unix)]
    async fn next(&mut self) -> &'static str {
        tokio::select! {
            _ = self.int.recv() => "SIGINT",
            _ = self.term.recv() => "SIGTERM",
        }
    }

    #[cfg(not(unix))]
    async fn next(&mut self) -> &'static str {
        let _ = tokio::signal::ctrl_c().await;
        "Ctrl-C"
    }
}

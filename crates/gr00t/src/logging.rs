//! The process's log (text or JSON on stderr, `RUST_LOG` filters) and, with `--otlp-endpoint`,
//! the export of request spans: set up once at start, for every door and command.

/// Log output format (`--log-format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, event fields at the top level.
    Json,
}

/// Installs the global log subscriber on stderr (`RUST_LOG` filters; default `info`) and,
/// with an `otlp_endpoint`, the OTLP exporter of the request spans ([`crate::otlp`]).
pub fn init_logging(format: LogFormat, otlp_endpoint: Option<&str>) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let stderr = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let log = match format {
        // Plain text when piped, so tooling can match log lines such as the start-up line.
        LogFormat::Text => stderr
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .boxed(),
        // Each line lists its spans outermost first: a request's id, door, session, embodiment.
        LogFormat::Json => stderr
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(true)
            .boxed(),
    };
    // Its own filter: RUST_LOG quietens the log, not the traces.
    let otlp = otlp_endpoint.and_then(|url| match crate::otlp::OtlpLayer::start(url) {
        Ok(layer) => Some(layer.with_filter(crate::otlp::span_filter())),
        Err(e) => {
            eprintln!("--otlp-endpoint {url}: cannot start the exporter thread: {e}");
            None
        }
    });
    tracing_subscriber::registry()
        .with(log.with_filter(filter))
        .with(otlp)
        .init();
    if let Some(url) = otlp_endpoint {
        tracing::info!("exporting request spans over OTLP/HTTP to {url}/v1/traces");
    }
}

//! Logging of both binaries: `tracing` to standard error, filtered by `$TESSERA_LOG` or
//! `$RUST_LOG`.

use std::io::IsTerminal;

/// The log filter: `$TESSERA_LOG`, else `$RUST_LOG`, else `default` (`info` for servers,
/// `warn` for commands). Both take `tracing_subscriber`'s directives (`debug`,
/// `tessera_net=debug,warn`); `TESSERA_LOG` wins when both are set, and an empty one counts
/// as unset. A filter that does not parse is reported and the default used.
fn filter(default: &str) -> tracing_subscriber::EnvFilter {
    for variable in ["TESSERA_LOG", "RUST_LOG"] {
        let Some(directives) = std::env::var(variable)
            .ok()
            .filter(|directives| !directives.trim().is_empty())
        else {
            continue;
        };
        match tracing_subscriber::EnvFilter::try_new(&directives) {
            Ok(filter) => return filter,
            Err(err) => {
                eprintln!("tessera: ignoring {variable}={directives:?}: {err}");
                break;
            }
        }
    }
    tracing_subscriber::EnvFilter::new(default)
}

/// Sends this process's logs to standard error at level `default` unless the environment
/// says otherwise; colours only for a person at a terminal (server logs go to files).
pub fn init(default: &str) {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(filter(default))
        .init();
}

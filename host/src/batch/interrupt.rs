//! Ctrl-C and SIGTERM: the first asks every stage to stop and lets what is in flight
//! finish, the second stops at once; and the command line that answers the rest.

use tokio::task::JoinSet;

use super::progress::Progress;
use super::stop::Stop;

/// Waits for the workers; on the first SIGINT/SIGTERM asks every stage to stop (no new
/// lines, no more retries; what is in flight finishes and is written), on the second
/// leaves at once. Whether it was interrupted.
pub(crate) async fn wait_or_interrupt(workers: &mut JoinSet<()>, stop: &Stop, progress: &Progress) -> bool {
    let mut signals = Signals::new();
    let mut interrupted = false;
    loop {
        tokio::select! {
            joined = workers.join_next() => {
                if joined.is_none() {
                    return interrupted;
                }
            }
            () = signals.next() => {
                if interrupted {
                    progress.println("tensorplug infer: stopping now; lines in flight will be answered by --resume");
                    // Their answers are dropped with them; the writer then writes what
                    // it has and finishes.
                    workers.abort_all();
                    while workers.join_next().await.is_some() {}
                    return true;
                }
                interrupted = true;
                stop.request();
                progress.println(
                    "tensorplug infer: interrupted: finishing the lines in flight (interrupt again to stop now)",
                );
            }
        }
    }
}

/// SIGINT and SIGTERM, as one stream.
struct Signals {
    #[cfg(unix)]
    terminate: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    fn new() -> Self {
        Signals {
            #[cfg(unix)]
            terminate: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok(),
        }
    }

    async fn next(&mut self) {
        #[cfg(unix)]
        {
            let terminate = async {
                match &mut self.terminate {
                    Some(signal) => {
                        signal.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                () = terminate => {}
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// This run's command line with `--resume` added (if it is not there), quoted for a
/// POSIX shell.
pub(crate) fn resume_command() -> String {
    let mut args: Vec<String> = std::env::args().collect();
    if !args.iter().any(|a| a == "--resume") {
        args.push("--resume".into());
    }
    args.iter().map(|a| shell_quote(a)).collect::<Vec<_>>().join(" ")
}

fn shell_quote(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@,+%".contains(c));
    if plain {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_resume_hint_quotes_what_a_shell_would_split() {
        let cases = [
            ("out.jsonl", "out.jsonl"),
            ("my file", "'my file'"),
            ("it's", "'it'\\''s'"),
            ("", "''"),
        ];
        for (arg, quoted) in cases {
            assert_eq!(shell_quote(arg), quoted, "{arg:?}");
        }
    }
}

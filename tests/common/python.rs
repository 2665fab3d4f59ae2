//! Python for the tests that check the server with a Python library: the virtualenv that
//! `scripts/python-env.sh` builds (the first run downloads its packages), and commands
//! run with a time limit. No Python 3 (with venv and pip) or no PyPI is a failure, not a
//! skip.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The virtualenv's folder, where `scripts/python-env.sh` puts it by default: in cargo's
/// target folder (unless `TENSORPLUG_PYTHON_ENV` says otherwise).
fn python_env() -> PathBuf {
    match std::env::var_os("TENSORPLUG_PYTHON_ENV") {
        Some(folder) => PathBuf::from(folder),
        None => Path::new(env!("CARGO_TARGET_TMPDIR"))
            .parent()
            .expect("the target folder holds tmp/")
            .join("python-env"),
    }
}

/// The virtualenv's python, the virtualenv built first if needed.
pub async fn python() -> PathBuf {
    let mut setup = Command::new("bash");
    setup
        .arg(super::root().join("scripts/python-env.sh"))
        .env("TENSORPLUG_PYTHON_ENV", python_env());
    let output = run_bounded("scripts/python-env.sh", setup, Duration::from_secs(900)).await;
    assert!(
        output.status.success(),
        "scripts/python-env.sh could not build the test virtualenv (it needs python3 with venv and pip, \
         and PyPI)\n{}",
        shown(&output)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let python = PathBuf::from(stdout.lines().last().expect("the virtualenv's python").trim());
    assert!(
        python.is_file(),
        "{} is not a file\n{}",
        python.display(),
        shown(&output)
    );
    python
}

/// Runs `command` (stdin closed, output captured) on the blocking pool; past `limit` its
/// whole process group is killed and the test fails.
pub async fn run_bounded(what: &'static str, mut command: Command, limit: Duration) -> Output {
    use std::os::unix::process::CommandExt;
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("PYTHONPATH")
        .env_remove("PYTHONHOME")
        .process_group(0);
    tokio::task::spawn_blocking(move || {
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("{what}: could not start {command:?}: {e}"));
        let group = format!("-{}", child.id());
        let (done, finished) = mpsc::channel::<()>();
        let watchdog = std::thread::spawn(move || {
            let timed_out = finished.recv_timeout(limit) == Err(mpsc::RecvTimeoutError::Timeout);
            if timed_out {
                let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
            }
            timed_out
        });
        let output = child.wait_with_output().expect("wait for the child");
        drop(done);
        let timed_out = watchdog.join().expect("watchdog");
        assert!(
            !timed_out,
            "{what} took longer than {limit:?} and was killed\n{}",
            shown(&output)
        );
        output
    })
    .await
    .expect("blocking task")
}

pub fn shown(output: &Output) -> String {
    format!(
        "exit: {}\n--- stdout ---\n{}--- stderr ---\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

//! End to end: `tensorplug infer --transport nats`, the real binary, against a real
//! `nats-server -js` and a real `tensorplug serve --nats-url` child process: the 450 digits
//! requests answer, line for line, exactly as the same run over REST does (JSON and binary
//! tensor data), and `--resume` after an interrupted run answers exactly the missing lines.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::batch::{args, digits_answer, digits_file, infer_command, read_lines, signal, wait_for_lines};
use crate::common::nats::Broker;
use crate::common::{self, process::ServerProcess};
use crate::digits::{assert_matches, cases};

/// The longest a whole `tensorplug infer` run may take here.
const RUN_WITHIN: Duration = Duration::from_secs(180);

/// A broker and a server of the example models consuming from it.
async fn start() -> (Broker, ServerProcess) {
    let broker = Broker::start();
    let server = ServerProcess::spawn(&common::examples(), &["--nats-url", &broker.url()]).await;
    (broker, server)
}

/// Waits up to `within` for `child` to exit (killing it and failing if it does not): its
/// exit code (-1 for a signal) and standard error.
async fn wait_exit(mut child: Child, within: Duration) -> (i32, String) {
    // Read on its own thread, so that a chatty child never blocks on a full pipe.
    let mut stderr = child.stderr.take().expect("piped stderr");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("the child") {
            break status;
        }
        if started.elapsed() > within {
            let _ = child.kill();
            let _ = child.wait();
            panic!("tensorplug infer did not finish within {within:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let stderr = tokio::task::spawn_blocking(move || reader.join().expect("stderr reader"))
        .await
        .expect("join");
    (status.code().unwrap_or(-1), stderr)
}

/// Runs `tensorplug infer -m digits -i INPUT EXTRA -o OUTPUT` to the end: its exit code,
/// standard error and answer lines.
async fn run(input: &str, extra: &[&str], output: &Path) -> (i32, String, Vec<Value>) {
    let mut list = args(&["-m", "digits", "-i", input, "--timeout", "30"]);
    list.extend(extra.iter().map(|s| (*s).to_owned()));
    list.extend(["-o".into(), output.display().to_string()]);
    let child = infer_command(&list).spawn().expect("spawn tensorplug infer");
    let (code, stderr) = wait_exit(child, RUN_WITHIN).await;
    (code, stderr, read_lines(output))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_digits_requests_over_nats_answer_line_for_line_as_over_rest() {
    let (broker, server) = start().await;
    let nats = broker.url();
    let rest = server.address.to_string();
    let dir = tempfile::tempdir().unwrap();
    let input = digits_file();
    let cases = cases();
    for (form, flags) in [("JSON", vec![]), ("binary", vec!["-b"])] {
        let over_rest = {
            let mut extra = vec!["-u", rest.as_str(), "-w", "4"];
            extra.extend(&flags);
            let (code, stderr, lines) = run(&input, &extra, &dir.path().join(format!("rest-{form}.jsonl"))).await;
            assert_eq!(code, 0, "REST {form}: {stderr}");
            lines
        };
        let started = Instant::now();
        // --batch-size has no effect over NATS (there is no metadata to say the model
        // batches): the run still succeeds, each line its own request.
        let mut extra = vec!["-u", nats.as_str(), "-t", "nats", "-w", "4", "-s", "8"];
        extra.extend(&flags);
        let (code, stderr, lines) = run(&input, &extra, &dir.path().join(format!("nats-{form}.jsonl"))).await;
        assert_eq!(code, 0, "NATS {form}: {stderr}");
        assert!(stderr.contains("450 ok, 0 failed"), "NATS {form}: {stderr}");
        assert!(!stderr.contains("batch dimension"), "NATS {form}: {stderr}");
        assert_eq!(lines.len(), 450, "NATS {form}");
        assert_eq!(over_rest.len(), 450, "REST {form}");
        for (i, (line, expected)) in lines.iter().zip(&over_rest).enumerate() {
            // The same answer line: its outputs, id, model, batch_index, and (a line sent
            // alone) its request's id as inference_id and one attempt.
            assert_eq!(line, expected, "NATS {form} line {i}");
            assert_eq!(line["parameters"]["batch_index"], i, "in input order");
            assert_eq!(line["parameters"]["attempts"], 1);
            let (label, proba) = digits_answer(line);
            assert_matches(&cases[i], label, &proba, &format!("NATS {form} line {i}"));
        }
        eprintln!("NATS {form}: {:?}", started.elapsed());
    }
    drop(server);
    drop(broker);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_over_nats_after_an_interrupted_run_answers_exactly_the_missing_lines() {
    let (broker, server) = start().await;
    let dir = tempfile::tempdir().unwrap();
    // The digits requests eight times over: long enough to interrupt part way.
    const COPIES: usize = 8;
    let digits = std::fs::read_to_string(digits_file()).unwrap();
    let input: PathBuf = dir.path().join("in.jsonl");
    std::fs::write(&input, digits.repeat(COPIES)).unwrap();
    let total = 450 * COPIES;
    let output = dir.path().join("out.jsonl");
    let list = args(&[
        "-u",
        &broker.url(),
        "-t",
        "nats",
        "-m",
        "digits",
        "-i",
        &input.display().to_string(),
        "-o",
        &output.display().to_string(),
        "-w",
        "2",
        "--timeout",
        "30",
    ]);

    // Ctrl-C part way: the lines in flight are answered and written, in order.
    let mut child = infer_command(&list).spawn().expect("spawn");
    wait_for_lines(&output, 300, &mut child).await;
    signal(&child, "-INT");
    let (code, stderr) = wait_exit(child, RUN_WITHIN).await;
    assert_eq!(code, 130, "{stderr}");
    assert!(stderr.contains("--resume"), "{stderr}");
    let first = read_lines(&output);
    eprintln!("interrupted after {} of {total} lines", first.len());
    assert!(first.len() >= 300 && first.len() < total, "{} lines", first.len());
    for (i, line) in first.iter().enumerate() {
        assert_eq!(line["parameters"]["batch_index"], i, "in order, whole lines");
    }

    // Resumed to the end: every line exactly once, each answered correctly.
    let mut resumed = list.clone();
    resumed.push("--resume".into());
    let child = infer_command(&resumed).spawn().expect("spawn");
    let (code, stderr) = wait_exit(child, RUN_WITHIN).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains(&format!("resuming: {} lines already answered", first.len())),
        "{stderr}"
    );
    let all = read_lines(&output);
    assert_eq!(all.len(), total, "no duplicates, nothing missing");
    let cases = cases();
    let mut seen = vec![false; total];
    for line in &all {
        let index = line["parameters"]["batch_index"].as_u64().expect("batch_index") as usize;
        assert!(!std::mem::replace(&mut seen[index], true), "line {index} twice");
        let (label, proba) = digits_answer(line);
        assert_matches(&cases[index % 450], label, &proba, &format!("line {index}"));
    }
    drop(server);
    drop(broker);
}

//! The docs check: every shell command the README and docs/ print, as written. Each
//! ```sh block is split into commands the way a shell would (quotes, `\` line joins,
//! comments, `|`, `&&`, `;`, `&`); then:
//! - `curl` commands run for real, against one server serving the example repository with
//!   the flags the README gives it (`--admin-token s3cret`), its REST port put where the
//!   docs say `localhost:8080`; each must answer 2xx;
//! - `tensorplug …` command lines are parsed by the real command line (`Cli`): every
//!   subcommand, flag and value the docs print must exist and be valid;
//! - scripts and files a command names must exist (scripts executable, `bash -n` clean);
//! - the ports, the image's version and the gRPC methods the docs print must be the code's.
//!
//! What is not run (it builds for minutes, needs another program, or a scaffolded project)
//! is still checked as above, and counted.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use clap::Parser;
use tensorplug::app::config::{Cli, Command as Sub, GrpcPort};

use crate::common::process::ServerProcess;
use crate::common::root;

/// One command as a shell would run it.
#[derive(Debug)]
struct ShellCommand {
    /// `file:line` of its first line.
    place: String,
    /// Its words, quotes removed; a `$(…)` or `$VAR` word is kept as written.
    argv: Vec<String>,
}

/// The commands of every ```sh block of `file`.
fn commands_of(file: &Path) -> Vec<ShellCommand> {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let name = file.strip_prefix(root()).unwrap_or(file).display().to_string();
    let mut commands = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((at, line)) = lines.next() {
        let fence = line.trim_start();
        if fence.starts_with("```") && !(fence == "```sh" || fence == "```bash") {
            // Another language's block: skipped whole.
            for (_, line) in lines.by_ref() {
                if line.trim_start().starts_with("```") {
                    break;
                }
            }
            continue;
        }
        if !(fence == "```sh" || fence == "```bash") {
            // Prose: the commands it quotes inline that can be checked as they stand.
            for (i, span) in line.split('`').enumerate() {
                if i % 2 == 1 && (span.starts_with("./scripts/") || span.starts_with("podman run ")) {
                    for (_, argv) in split_commands(span) {
                        commands.push(ShellCommand {
                            place: format!("{name}:{}", at + 1),
                            argv,
                        });
                    }
                }
            }
            continue;
        }
        let indent = line.len() - fence.len();
        let mut block = String::new();
        let first = at + 2;
        for (_, line) in lines.by_ref() {
            if line.trim_start().starts_with("```") {
                break;
            }
            block.push_str(line.get(indent..).unwrap_or(line.trim_start()));
            block.push('\n');
        }
        for (offset, argv) in split_commands(&block) {
            commands.push(ShellCommand {
                place: format!("{name}:{}", first + offset),
                argv,
            });
        }
    }
    commands
}

/// A shell block's commands: (line offset of each, its words).
fn split_commands(block: &str) -> Vec<(usize, Vec<String>)> {
    let mut commands = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut word: Option<String> = None;
    let mut line = 0;
    let mut start = 0;
    let mut chars = block.chars().peekable();
    let end_word = |word: &mut Option<String>, words: &mut Vec<String>| {
        if let Some(w) = word.take() {
            words.push(w);
        }
    };
    let mut end_command = |words: &mut Vec<String>, start: usize| {
        if !words.is_empty() {
            commands.push((start, std::mem::take(words)));
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'\n') => {
                chars.next();
                line += 1;
            }
            '\\' => word.get_or_insert_with(String::new).extend(chars.next()),
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                for c in chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                    line += usize::from(c == '\n');
                    w.push(c);
                }
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => w.extend(chars.next()),
                        c => {
                            line += usize::from(c == '\n');
                            w.push(c);
                        }
                    }
                }
            }
            '$' if chars.peek() == Some(&'(') => {
                let w = word.get_or_insert_with(String::new);
                w.push('$');
                let mut depth = 0;
                for c in chars.by_ref() {
                    w.push(c);
                    match c {
                        '(' => depth += 1,
                        ')' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                }
            }
            '#' if word.is_none() => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        end_command(&mut words, start);
                        line += 1;
                        start = line;
                        break;
                    }
                }
            }
            '\n' | ';' | '|' | '&' => {
                end_word(&mut word, &mut words);
                end_command(&mut words, start);
                if c == '\n' {
                    line += 1;
                }
                if matches!(c, '|' | '&') && chars.peek() == Some(&c) {
                    chars.next();
                }
                start = line;
            }
            ' ' | '\t' => end_word(&mut word, &mut words),
            '>' | '<' if word.is_none() => {
                // A redirection: its target is not a word of the command.
                while chars.peek() == Some(&' ') {
                    chars.next();
                }
                while chars.peek().is_some_and(|c| !c.is_whitespace()) {
                    chars.next();
                }
            }
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    end_word(&mut word, &mut words);
    end_command(&mut words, start);
    commands
}

/// The docs the check reads: the README and every page of docs/.
fn documents() -> Vec<std::path::PathBuf> {
    let mut files = vec![root().join("README.md")];
    let mut pages: Vec<_> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    pages.sort();
    files.extend(pages);
    files
}

/// Commands not run, by why; each is still checked statically.
const NOT_RUN: &[(&str, &str)] = &[
    (
        "./scripts/serve-example.sh",
        "builds and serves for minutes: the server below serves what it serves, with its flags",
    ),
    ("./scripts/test.sh", "the test command itself"),
    (
        "./scripts/build-image.sh",
        "the image test runs it, with its default name (scripts/test-image.sh)",
    ),
    ("./scripts/bench-", "a benchmark: minutes of load"),
    ("BENCH_", "a benchmark: minutes of load"),
    ("./scripts/metrics-flood.sh", "a benchmark"),
    (
        "./build.sh",
        "inside a scaffolded project (tests/e2e/new.rs builds and serves every language's)",
    ),
    ("cargo", "builds for minutes (the test command builds the same)"),
    ("podman", "the image test runs it (scripts/test-image.sh)"),
    (
        "grpcurl",
        "not installed here: its method names are checked against the service",
    ),
    ("nats-server", "a broker (tests/e2e/nats.rs starts its own)"),
    ("python3", "tests/e2e/nats.rs runs the NATS example"),
    ("tensorplug-loadgen", "a benchmark"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_the_docs_print_works_as_printed() {
    let commands: Vec<ShellCommand> = documents().iter().flat_map(|f| commands_of(f)).collect();
    assert!(commands.len() > 50, "the docs' commands were not found: {commands:?}");

    // The defaults the docs print.
    let Sub::Serve(defaults) = Cli::try_parse_from(["tensorplug", "serve"]).unwrap().command else {
        unreachable!()
    };
    assert_eq!((defaults.http_port, defaults.grpc_port), (8080, GrpcPort::Port(8081)));

    // The server the README's commands talk to, as serve-example.sh and the README start it.
    let mut flags = vec!["--admin-token".to_owned(), "s3cret".to_owned()];
    match crate::common::onnx::onnxruntime_library() {
        Some(library) => flags.extend(["--onnxruntime-lib".into(), library.display().to_string()]),
        None => panic!("the docs' minilm commands need ONNX Runtime: run ./scripts/python-env.sh"),
    }
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let server = ServerProcess::spawn(&crate::common::example_repository(), &flags).await;
    let rest = format!("127.0.0.1:{}", server.address.port());

    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    let mut failures = Vec::new();
    for command in &commands {
        // Leading `NAME=value` words set the environment.
        let argv: Vec<&str> = command
            .argv
            .iter()
            .map(String::as_str)
            .skip_while(|w| {
                w.split_once('=')
                    .is_some_and(|(n, _)| n.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
            })
            .collect();
        let Some(&program) = argv.first() else { continue };
        let mut fail = |why: String| failures.push(format!("{}: {}: {why}", command.place, command.argv.join(" ")));
        // Files named: scripts exist and parse.
        for word in &argv {
            if let Some(script) = word
                .strip_prefix("./")
                .filter(|w| w.starts_with("scripts/") && w.ends_with(".sh"))
            {
                let path = root().join(script);
                if !path.is_file() {
                    fail(format!("{script} does not exist"));
                } else if !Command::new("bash").arg("-n").arg(&path).status().unwrap().success() {
                    fail(format!("{script} does not parse"));
                }
            }
        }
        if program == "tensorplug" {
            let words: Vec<String> = argv
                .iter()
                .filter(|w| !(w.starts_with('[') && w.ends_with(']')))
                .map(|w| {
                    if w.starts_with('$') {
                        "placeholder".to_owned()
                    } else {
                        (*w).to_owned()
                    }
                })
                .collect();
            match Cli::try_parse_from(&words) {
                Ok(_) => {
                    *counts
                        .entry("tensorplug command lines parsed by the real CLI")
                        .or_default() += 1
                }
                Err(error) => fail(format!(
                    "the CLI refuses it: {}",
                    error.to_string().lines().next().unwrap_or("")
                )),
            }
            continue;
        }
        if program == "curl" {
            if argv.iter().any(|w| w.contains("my-embedder") || w.contains("doubler")) {
                *counts
                    .entry("curl to a scaffolded project's model (tests/e2e/new.rs)")
                    .or_default() += 1;
                continue;
            }
            let words: Vec<String> = argv[1..]
                .iter()
                .map(|w| w.replace("localhost:8080", &rest).replace("$TOKEN", "s3cret"))
                .collect();
            let output = Command::new("curl")
                .args(&words)
                .args(["-o", "/dev/null", "-w", "%{http_code}", "--max-time", "60"])
                .output()
                .expect("curl");
            let status = String::from_utf8_lossy(&output.stdout).into_owned();
            if !status.starts_with('2') {
                fail(format!("answered {status}"));
            }
            *counts.entry("curl commands run against the server").or_default() += 1;
            continue;
        }
        if program == "podman" {
            if let Some(image) = argv.iter().find(|w| w.starts_with("tensorplug:")) {
                if *image != format!("tensorplug:{}", env!("CARGO_PKG_VERSION")) {
                    fail(format!(
                        "{image}: the image built is tensorplug:{}",
                        env!("CARGO_PKG_VERSION")
                    ));
                }
            }
        }
        if program == "grpcurl" {
            let proto = std::fs::read_to_string(root().join("proto/grpc_service.proto")).unwrap_or_default();
            for word in &argv {
                if let Some(method) = word.strip_prefix("inference.GRPCInferenceService/") {
                    if !proto.contains(&format!("rpc {method}(")) {
                        fail(format!("no method {method} in the service"));
                    }
                }
            }
        }
        if program == "python3" {
            if let Some(file) = argv.get(1).filter(|f| f.ends_with(".py")) {
                if !root().join(file).is_file() {
                    fail(format!("{file} does not exist"));
                }
            }
        }
        let full = command.argv.join(" ");
        match NOT_RUN
            .iter()
            .find(|(prefix, _)| full.starts_with(prefix) || program.starts_with(prefix))
        {
            Some((_, why)) => *counts.entry(why).or_default() += 1,
            None => {
                *counts
                    .entry("other commands (shell steps, examples of its output)")
                    .or_default() += 1
            }
        }
    }
    eprintln!("docs check: {} commands", commands.len());
    for (what, count) in &counts {
        eprintln!("  {count:3}  {what}");
    }
    assert!(
        failures.is_empty(),
        "commands the docs print that do not work:\n{}",
        failures.join("\n")
    );
    assert!(
        counts.get("curl commands run against the server").copied().unwrap_or(0) >= 15,
        "{counts:?}"
    );
}

#[test]
fn commands_are_split_as_a_shell_splits_them() {
    let block = "curl -s a -H 'x: y' \\\n  -d '{\n\"a\": 1}'   # a comment\nA=1 ./scripts/x.sh | grep y && tensorplug check \"$(echo m)\"\n# only a comment\n";
    let commands = split_commands(block);
    let argv: Vec<Vec<&str>> = commands
        .iter()
        .map(|(_, a)| a.iter().map(String::as_str).collect())
        .collect();
    assert_eq!(
        argv,
        vec![
            vec!["curl", "-s", "a", "-H", "x: y", "-d", "{\n\"a\": 1}"],
            vec!["A=1", "./scripts/x.sh"],
            vec!["grep", "y"],
            vec!["tensorplug", "check", "$(echo m)"],
        ]
    );
    assert_eq!(
        commands.iter().map(|(line, _)| *line).collect::<Vec<_>>(),
        vec![0, 3, 3, 3]
    );
}

//! The layering of [`crate`], checked: every `crate::<module>` a source file names must
//! be its own layer or one below. Protocol and serving sit side by side (neither names
//! the other), and so do the front doors: the edges, http, grpc and nats, and batch
//! (`tensorplug infer`), which speaks their wire formats through protocol.

use std::path::Path;

/// Top-level modules from the top layer down; modules on one line are peers.
const LAYERS: &[&[&str]] = &[
    &["app"],
    &["batch", "http", "grpc", "nats"],
    &["api"],
    &["protocol", "serving"],
    &["pipeline"],
    &["runtime"],
    &["model"],
];

fn rank(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

/// Every `crate::x` named in `text`.
fn named_modules(text: &str) -> Vec<String> {
    text.match_indices("crate::")
        .map(|(at, _)| {
            text[at + 7..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect()
        })
        .collect()
}

fn visit(dir: &Path, module: &str, edges: &mut Vec<(String, String, String)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            visit(&path, module, edges);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            for named in named_modules(&text) {
                if named != module && rank(&named).is_some() {
                    edges.push((module.to_owned(), named, path.display().to_string()));
                }
            }
        }
    }
}

#[test]
fn layers_import_downwards() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut edges = Vec::new();
    for module in LAYERS.iter().flat_map(|layer| layer.iter()) {
        let dir = src.join(module);
        assert!(dir.is_dir(), "{module} should be a folder");
        visit(&dir, module, &mut edges);
    }
    let upward: Vec<String> = edges
        .iter()
        .filter(|(from, to, _)| rank(to) <= rank(from))
        .map(|(from, to, file)| format!("{from} -> {to} ({file})"))
        .collect();
    assert!(
        upward.is_empty(),
        "imports that point up or sideways:\n{}",
        upward.join("\n")
    );
}

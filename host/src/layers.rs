//! The layering of [`crate`], checked: every `crate::<module>` a source file names must
//! be its own layer or one below. Protocol and serving sit side by side (neither names
//! the other), and so do the front doors: the edges, http, grpc and nats, and batch
//! (`tensorplug infer`), which speaks their wire formats through protocol
//! (`layers_import_downwards`).
//!
//! Within each top-level module, the files (modules) import each other without circles
//! (`modules_import_without_circles`): what two files share goes in a third that names
//! neither. A file names another by a path in its code — `use super::x::Y`,
//! `use crate::grpc::{x, y}`, `super::x::f()`, `self::x::`, a submodule's `x::` — read from
//! the source text with comments and string literals left out (a doc link is not an
//! import). Not counted: a module and its own ancestors or descendants (`a/b.rs` taking
//! `super::X` from `a/mod.rs`, `a/mod.rs` naming `b::Y`): a module's root declares its
//! files and gathers them. Not seen: an import through a re-export of the root
//! (`super::Y` where `a/mod.rs` says `pub use c::Y`). One circle is let through, the one
//! `runtime/`'s generated bindings close ([`CIRCLES_LET_THROUGH`]).

use std::collections::{HashMap, VecDeque};
use std::path::Path;

/// Top-level modules from the top layer down; modules on one line are peers.
const LAYERS: &[&[&str]] = &[
    &["app"],
    &["batch", "http", "grpc", "nats"],
    &["api"],
    &["protocol", "serving"],
    &["pipeline"],
    &["runtime"],
    &["traces"],
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

/// Circles `modules_import_without_circles` lets through, as (importer, imported) module paths: one edge of each,
/// which the circle needs to close.
///
/// - `runtime::bindings` → `runtime::nn`: wasmtime's `bindgen!` generates `wasi:nn`'s host
///   traits in `runtime/bindings.rs`, and its `with:` map names the host's own types for
///   the interface's resources (`crate::runtime::nn::NnGraph`, `NnTensor`, `NnContext`,
///   `NnError`); `runtime::nn` implements the generated traits over those types. The
///   generated code has to name the types it is implemented with, so the circle is the
///   code generator's, not a design choice. Only this edge is exempt: anything else
///   `runtime/bindings.rs` named, or anything naming it, is checked as everywhere.
const CIRCLES_LET_THROUGH: &[(&str, &str)] = &[("runtime::bindings", "runtime::nn")];

/// `text` with its comments, string and character literals blanked (lines kept), so that
/// only code is read: a doc link is not an import.
fn code_only(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let blank = |out: &mut String, piece: &str| out.extend(piece.chars().map(|c| if c == '\n' { '\n' } else { ' ' }));
    let is_ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut i = 0;
    while i < bytes.len() {
        let rest = &text[i..];
        let after_ident = i > 0 && is_ident(bytes[i - 1]);
        let end = if rest.starts_with("//") {
            rest.find('\n').unwrap_or(rest.len())
        } else if rest.starts_with("/*") {
            let mut depth = 0;
            let mut j = 0;
            loop {
                if rest[j..].starts_with("/*") {
                    depth += 1;
                    j += 2;
                } else if rest[j..].starts_with("*/") {
                    depth -= 1;
                    j += 2;
                } else {
                    j += rest[j..].chars().next().map_or(1, char::len_utf8);
                }
                if depth == 0 || j >= rest.len() {
                    break j.min(rest.len());
                }
            }
        } else if let Some(raw) = (!after_ident)
            .then(|| rest.strip_prefix("br").or_else(|| rest.strip_prefix('r')))
            .flatten()
            .filter(|raw| raw.trim_start_matches('#').starts_with('"'))
        {
            let hashes = raw.len() - raw.trim_start_matches('#').len();
            let close = format!("\"{}", "#".repeat(hashes));
            let open = rest.len() - raw.len() + hashes + 1;
            rest[open..]
                .find(&close)
                .map_or(rest.len(), |at| open + at + close.len())
        } else if rest.starts_with('"') || (!after_ident && rest.starts_with("b\"")) {
            let open = rest.find('"').unwrap_or(0) + 1;
            let mut j = open;
            while j < rest.len() && bytes[i + j] != b'"' {
                j += if bytes[i + j] == b'\\' { 2 } else { 1 };
            }
            (j + 1).min(rest.len())
        } else if let Some(body) = rest.strip_prefix('\'') {
            // A character literal ('x', '\n', '\u{1F600}'); a lifetime has no closing quote.
            let len = if body.starts_with('\\') {
                body.find('\'').map(|at| at + 1)
            } else {
                body.chars()
                    .next()
                    .filter(|c| body[c.len_utf8()..].starts_with('\''))
                    .map(|c| c.len_utf8() + 1)
            };
            len.map_or(0, |len| len + 1)
        } else {
            0
        };
        if end == 0 {
            let c = rest.chars().next().unwrap_or(' ');
            out.push(c);
            i += c.len_utf8();
        } else {
            blank(&mut out, &rest[..end]);
            i += end;
        }
    }
    out
}

/// The tokens that matter for paths: identifiers, `::`, and single punctuation.
fn tokens(code: &str) -> Vec<&str> {
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < code.len() {
        let rest = &code[i..];
        let c = rest.chars().next().unwrap_or(' ');
        let len = if c.is_whitespace() {
            i += c.len_utf8();
            continue;
        } else if c.is_alphanumeric() || c == '_' {
            rest.find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len())
        } else if rest.starts_with("::") {
            2
        } else {
            c.len_utf8()
        };
        tokens.push(&rest[..len]);
        i += len;
    }
    tokens
}

/// One source file: the module it is, and its code.
struct SourceFile {
    module: Vec<String>,
    path: String,
    code: String,
}

/// Every `.rs` file under `dir` as the module it is (`a/b.rs` is `a::b`, `a/mod.rs` is `a`;
/// a `#[path = "x.rs"] mod name;` makes `x.rs` the module `name` of the file naming it).
fn source_files(src: &Path, dir: &Path, files: &mut Vec<SourceFile>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            source_files(src, &path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let relative = path.strip_prefix(src).unwrap().with_extension("");
            let mut module: Vec<String> = relative
                .iter()
                .map(|part| part.to_string_lossy().into_owned())
                .collect();
            if module.last().is_some_and(|last| last == "mod") {
                module.pop();
            }
            let text = std::fs::read_to_string(&path).unwrap();
            files.push(SourceFile {
                module,
                path: path.display().to_string(),
                code: code_only(&text),
            });
        }
    }
    // `#[path]` modules: renamed to the module their declaration makes them.
    let declared: Vec<(Vec<String>, String, String)> = files
        .iter()
        .flat_map(|file| {
            let folder = Path::new(&file.path).parent().unwrap().to_path_buf();
            let text = std::fs::read_to_string(&file.path).unwrap();
            text.match_indices("#[path = \"")
                .filter_map(|(at, _)| {
                    let rest = &text[at + 10..];
                    let target = &rest[..rest.find('"')?];
                    let name = rest.split("mod ").nth(1)?.split(';').next()?.trim().to_owned();
                    let target = folder.join(target).display().to_string();
                    Some((file.module.clone(), name, target))
                })
                .collect::<Vec<_>>()
        })
        .collect();
    for (parent, name, target) in declared {
        if let Some(file) = files.iter_mut().find(|file| file.path == target) {
            file.module = parent.iter().cloned().chain([name]).collect();
        }
    }
}

/// The paths a file's code names, each with the module it is named from (the file's own,
/// or an inline `mod x { ... }` inside it): `use` trees expanded, and every other path
/// that starts with `crate`, `self`, `super` or a submodule of the file's module.
fn named_paths(file: &SourceFile, submodules: &[String]) -> Vec<(Vec<String>, Vec<String>)> {
    let tokens = tokens(&file.code);
    let mut paths = Vec::new();
    // Inline modules open here: (brace depth inside them, name).
    let mut inline: Vec<(usize, String)> = Vec::new();
    let mut depth = 0;
    let mut i = 0;
    let here = |inline: &[(usize, String)]| -> Vec<String> {
        file.module
            .iter()
            .cloned()
            .chain(inline.iter().map(|(_, name)| name.clone()))
            .collect()
    };
    while i < tokens.len() {
        let token = tokens[i];
        if token == "mod" && tokens.get(i + 2) == Some(&"{") {
            depth += 1;
            inline.push((depth, tokens[i + 1].to_owned()));
            i += 3;
            continue;
        }
        match token {
            "{" => depth += 1,
            "}" => {
                if inline.last().is_some_and(|(d, _)| *d == depth) {
                    inline.pop();
                }
                depth -= 1;
            }
            "use" => {
                let start = i + 1 + usize::from(tokens.get(i + 1) == Some(&"::"));
                let (next, trees) = use_tree(&tokens, start, Vec::new());
                paths.extend(trees.into_iter().map(|path| (here(&inline), path)));
                i = next;
                continue;
            }
            _ => {
                let starts_a_path = matches!(token, "crate" | "self" | "super")
                    || (inline.is_empty() && submodules.iter().any(|m| m == token));
                if starts_a_path && tokens.get(i + 1) == Some(&"::") && (i == 0 || tokens[i - 1] != "::") {
                    let mut path = vec![token.to_owned()];
                    let mut j = i + 1;
                    while tokens.get(j) == Some(&"::")
                        && tokens
                            .get(j + 1)
                            .is_some_and(|t| t.starts_with(|c: char| c.is_alphabetic() || c == '_'))
                    {
                        path.push(tokens[j + 1].to_owned());
                        j += 2;
                    }
                    paths.push((here(&inline), path));
                    i = j;
                    continue;
                }
            }
        }
        i += 1;
    }
    paths
}

/// The paths of the `use` tree starting at `tokens[i]`, after `prefix`; and where it ends.
fn use_tree(tokens: &[&str], mut i: usize, mut prefix: Vec<String>) -> (usize, Vec<Vec<String>>) {
    let mut paths = Vec::new();
    while let Some(&token) = tokens.get(i) {
        match token {
            "{" => {
                i += 1;
                while tokens.get(i).is_some_and(|t| *t != "}") {
                    let (next, inner) = use_tree(tokens, i, prefix.clone());
                    paths.extend(inner);
                    i = next + usize::from(tokens.get(next) == Some(&","));
                }
                return (i + 1, paths);
            }
            "::" | "*" => i += 1,
            "as" => i += 2,
            "," | ";" | "}" => break,
            name => {
                prefix.push(name.to_owned());
                i += 1;
            }
        }
    }
    paths.push(prefix);
    (i, paths)
}

/// The file module `path`, named from module `from`, is in (its longest prefix that is
/// one); None for a path outside the crate's files (`std::...`, a local item).
fn resolve<'m>(
    from: &[String],
    path: &[String],
    modules: &'m [Vec<String>],
    submodules: &[String],
) -> Option<&'m Vec<String>> {
    let mut full: Vec<String> = match path[0].as_str() {
        "crate" => Vec::new(),
        "self" | "super" => from.to_vec(),
        name if submodules.iter().any(|m| m == name) => from.to_vec(),
        _ => return None,
    };
    let mut segments = path.iter().peekable();
    while let Some(segment) = segments.next_if(|s| matches!(s.as_str(), "crate" | "self" | "super")) {
        if segment == "super" {
            full.pop();
        }
    }
    full.extend(segments.cloned());
    (1..=full.len())
        .rev()
        .find_map(|n| modules.iter().find(|m| m[..] == full[..n]))
}

/// Whether `a` is `b`, or contains it.
fn contains(a: &[String], b: &[String]) -> bool {
    b.starts_with(a)
}

#[test]
fn modules_import_without_circles() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    for module in LAYERS.iter().flat_map(|layer| layer.iter()) {
        source_files(&src, &src.join(module), &mut files);
    }
    let modules: Vec<Vec<String>> = files.iter().map(|file| file.module.clone()).collect();
    // Importer -> imported, between files of one top-level module. A file naming its own
    // module's root (`super::X` from `a/b.rs`, X in `a/mod.rs`) or the root naming its
    // files is not counted: the root declares its files and gathers them, and the files
    // take what it defines; the circles forbidden are the files' among themselves.
    let mut edges: Vec<(String, String, String)> = Vec::new();
    let mut let_through = Vec::new();
    for file in &files {
        let submodules: Vec<String> = modules
            .iter()
            .filter(|m| m.len() == file.module.len() + 1 && m.starts_with(&file.module))
            .map(|m| m[m.len() - 1].clone())
            .collect();
        for (from, path) in named_paths(file, &submodules) {
            let Some(to) = resolve(&from, &path, &modules, &submodules) else {
                continue;
            };
            if to[0] != file.module[0] || contains(to, &file.module) || contains(&file.module, to) {
                continue;
            }
            let edge = (file.module.join("::"), to.join("::"), file.path.clone());
            if let Some(exempt) = CIRCLES_LET_THROUGH
                .iter()
                .find(|(a, b)| (*a, *b) == (&edge.0[..], &edge.1[..]))
            {
                let_through.push(*exempt);
            } else if !edges.contains(&edge) {
                edges.push(edge);
            }
        }
    }
    for exempt in CIRCLES_LET_THROUGH {
        assert!(
            let_through.contains(exempt),
            "{exempt:?} is let through but no longer named: drop it from CIRCLES_LET_THROUGH"
        );
    }
    // Each edge whose target leads back to its source closes a circle: found by a
    // breadth-first walk from the target, kept once per set of modules.
    let mut circles: Vec<Vec<&str>> = Vec::new();
    for (from, to, _) in &edges {
        let mut came_from: HashMap<&str, &str> = HashMap::new();
        let mut queue = VecDeque::from([to.as_str()]);
        while let Some(at) = queue.pop_front() {
            if at == from {
                break;
            }
            for (a, b, _) in edges.iter().filter(|(a, _, _)| a == at) {
                if b != to && !came_from.contains_key(b.as_str()) {
                    came_from.insert(b.as_str(), a.as_str());
                    queue.push_back(b);
                }
            }
        }
        if !came_from.contains_key(from.as_str()) {
            continue;
        }
        // from -> to -> ... -> (back to from)
        let mut back = vec![];
        let mut at = from.as_str();
        while at != to.as_str() {
            at = came_from[at];
            back.push(at);
        }
        let circle: Vec<&str> = std::iter::once(from.as_str()).chain(back.into_iter().rev()).collect();
        let mut members = circle.clone();
        members.sort_unstable();
        if !circles.iter().any(|known| {
            let mut known = known.clone();
            known.sort_unstable();
            known == members
        }) {
            circles.push(circle);
        }
    }
    let described: Vec<String> = circles
        .iter()
        .map(|circle| {
            let steps: Vec<String> = circle
                .iter()
                .zip(circle.iter().cycle().skip(1))
                .map(|(a, b)| {
                    let file = edges
                        .iter()
                        .find(|(f, t, _)| f == a && t == b)
                        .map_or("", |(_, _, file)| file);
                    let file = file.strip_prefix(env!("CARGO_MANIFEST_DIR")).unwrap_or(file);
                    format!("  {a} -> {b} (host{file})")
                })
                .collect();
            steps.join("\n")
        })
        .collect();
    assert!(
        circles.is_empty(),
        "import circles between the files of a module:\n{}",
        described.join("\n\n")
    );
}

#[test]
fn the_circle_check_reads_paths_in_code_only() {
    let code = code_only(concat!(
        "use super::{a::X, b::{self, Y as Z}};\n",
        "use crate::top::c::*;\n",
        "// use super::d;\n",
        "/* super::e::f() /* nested */ super::e::g() */\n",
        "fn f<'a>(x: &'a str) -> char { let _ = \"super::h::i\"; let _ = r#\"super::j\"#; ",
        "super::k::call(); self::l::m(); std::super_thing::n(); sub::o(); '{' }\n",
        "#[cfg(test)]\nmod tests {\n    use super::*;\n    use super::super::p::Q;\n}\n",
    ));
    let file = SourceFile {
        module: vec!["top".into(), "here".into()],
        path: String::new(),
        code,
    };
    let named: Vec<(String, String)> = named_paths(&file, &["sub".to_owned()])
        .into_iter()
        .map(|(from, path)| (from.join("::"), path.join("::")))
        .collect();
    let named: Vec<(&str, &str)> = named.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    assert_eq!(
        named,
        [
            ("top::here", "super::a::X"),
            ("top::here", "super::b::self"),
            ("top::here", "super::b::Y"),
            ("top::here", "crate::top::c"),
            ("top::here", "super::k::call"),
            ("top::here", "self::l::m"),
            ("top::here", "sub::o"),
            ("top::here::tests", "super"),
            ("top::here::tests", "super::super::p::Q"),
        ]
    );
    let modules: Vec<Vec<String>> = ["top", "top::here", "top::here::sub", "top::a", "top::b", "top::p"]
        .iter()
        .map(|m| m.split("::").map(str::to_owned).collect())
        .collect();
    let resolved = |from: &str, path: &str| {
        let from: Vec<String> = from.split("::").map(str::to_owned).collect();
        let path: Vec<String> = path.split("::").map(str::to_owned).collect();
        resolve(&from, &path, &modules, &["sub".to_owned()]).map(|m| m.join("::"))
    };
    assert_eq!(resolved("top::here", "super::a::X").as_deref(), Some("top::a"));
    assert_eq!(resolved("top::here", "crate::top::b::Y").as_deref(), Some("top::b"));
    assert_eq!(resolved("top::here", "sub::o").as_deref(), Some("top::here::sub"));
    assert_eq!(
        resolved("top::here::tests", "super::super::p::Q").as_deref(),
        Some("top::p")
    );
    assert_eq!(resolved("top::here", "super::Local").as_deref(), Some("top"));
    assert_eq!(resolved("top::here", "std::fmt"), None);
}

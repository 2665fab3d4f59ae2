//! `tensorplug new`: scaffolds a plugin project (sources, a build script, a model folder
//! and a README) from the templates under `host/templates/`, embedded in the binary.
//!
//! A project `NAME/` builds with `./build.sh` into the model folder `NAME/models/NAME/`,
//! which `tensorplug serve NAME/models` serves as generated. Where the SDK, the WIT folder
//! and wit-bindgen are defaults to this repository's, known at compile time.

use std::path::{Path, PathBuf};

/// The stage a project implements. A preprocess or postprocess project also gets a
/// predict stage (`y = 2 * x`) in its language, since a model cannot serve without one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum NewStage {
    Preprocess,
    Predict,
    Postprocess,
}

impl NewStage {
    fn as_str(self) -> &'static str {
        match self {
            Self::Preprocess => "preprocess",
            Self::Predict => "predict",
            Self::Postprocess => "postprocess",
        }
    }

    /// The WIT world a component of this stage targets.
    fn world(self) -> &'static str {
        match self {
            Self::Preprocess => "preprocessor",
            Self::Predict => "predictor",
            Self::Postprocess => "postprocessor",
        }
    }

    /// What the generated model does, for its README.
    fn what(self) -> &'static str {
        match self {
            Self::Preprocess => {
                "it checks each item's `x` before the predict stage made with it doubles it \
                 (`y = 2 * x`)."
            }
            Self::Predict => "`y = 2 * x` per item.",
            Self::Postprocess => {
                "it checks each item's `y` that the predict stage made with it computes \
                 (`y = 2 * x`)."
            }
        }
    }

    /// The item the stage refuses, for its README.
    fn rejected(self) -> &'static str {
        match self {
            Self::Preprocess | Self::Predict => "an item with a negative `x` fails alone with 422",
            Self::Postprocess => "an item whose `y` would be over 100 fails alone with 422",
        }
    }
}

/// The language a project is written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum NewLanguage {
    Rust,
    C,
    Cpp,
    Python,
    Js,
}

/// What to scaffold, and where.
#[derive(Clone, Debug)]
pub struct NewProject {
    pub name: String,
    pub stage: NewStage,
    pub language: NewLanguage,
    /// The folder the project folder is made in.
    pub parent: PathBuf,
    /// Rust: the guest SDK crate; C and C++: the folder holding the SDK header; Python:
    /// the folder holding the `tensorplug` package; JavaScript: the folder of tensorplug.js.
    pub sdk: Option<PathBuf>,
    /// C, C++, Python and JavaScript: the WIT folder the bindings are generated from.
    pub wit: Option<PathBuf>,
}

impl NewProject {
    /// A project with this repository's SDK and WIT.
    pub fn new(name: &str, stage: NewStage, language: NewLanguage, parent: &Path) -> Self {
        Self {
            name: name.to_owned(),
            stage,
            language,
            parent: parent.to_owned(),
            sdk: None,
            wit: None,
        }
    }
}

/// Why a project was not made.
#[derive(Debug, thiserror::Error)]
pub enum NewError {
    #[error(
        "`{0}` is not a valid plugin name: use 1-64 lowercase ASCII letters, digits, `-` or `_`, \
         starting with a letter (it names the crate, the folder and the model)"
    )]
    InvalidName(String),
    #[error("{0} already exists; tensorplug new makes a new folder and overwrites nothing")]
    Exists(PathBuf),
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
}

/// The repository this binary was built from: its SDKs and WIT are the defaults.
fn repository() -> PathBuf {
    let host = Path::new(env!("CARGO_MANIFEST_DIR"));
    host.parent().map_or_else(|| host.join(".."), Path::to_path_buf)
}

/// Checks that `name` works as a crate name, a folder name and a model name in a URL.
pub fn validate_name(name: &str) -> Result<(), NewError> {
    let mut chars = name.chars();
    let valid = chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
        && name.len() <= 64;
    if valid {
        Ok(())
    } else {
        Err(NewError::InvalidName(name.to_owned()))
    }
}

/// `template` with every `{{key}}` replaced by its value; unknown keys stay as they are.
pub fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let mut out = template.to_owned();
    for (key, value) in values {
        out = out.replace(&format!("{{{{{key}}}}}"), value);
    }
    out
}

/// A file of the project: its path inside the project folder, its text, whether it runs.
struct File {
    path: String,
    text: String,
    executable: bool,
}

/// The stages a project builds: its own, and predict beside a pre- or postprocess one.
fn built_stages(stage: NewStage) -> Vec<NewStage> {
    match stage {
        NewStage::Predict => vec![NewStage::Predict],
        NewStage::Preprocess => vec![NewStage::Preprocess, NewStage::Predict],
        NewStage::Postprocess => vec![NewStage::Predict, NewStage::Postprocess],
    }
}

/// The Rust source of a stage (pre- and postprocess share one, filled per stage).
fn rust_source(stage: NewStage) -> &'static str {
    match stage {
        NewStage::Predict => include_str!("../../templates/rust/predict.rs"),
        NewStage::Preprocess | NewStage::Postprocess => include_str!("../../templates/rust/check.rs"),
    }
}

/// The C or C++ source of a stage (pre- and postprocess share one, filled per stage).
fn c_source(stage: NewStage, cpp: bool) -> &'static str {
    match (stage == NewStage::Predict, cpp) {
        (true, false) => include_str!("../../templates/c/predict.c"),
        (false, false) => include_str!("../../templates/c/check.c"),
        (true, true) => include_str!("../../templates/cpp/predict.cpp"),
        (false, true) => include_str!("../../templates/cpp/check.cpp"),
    }
}

/// The values a pre- or postprocess source is filled with: the tensor it checks, where it
/// goes, and what it refuses (as code and as words).
fn check_values(stage: NewStage) -> [(&'static str, &'static str); 5] {
    let (stage_title, tensor, flow, refused_if, refusal) = match stage {
        NewStage::Postprocess => ("Postprocess", "y", " to the client", "> 100.0", "is over 100"),
        _ => ("Preprocess", "x", " to predict", "< 0.0", "is negative"),
    };
    [
        ("Stage", stage_title),
        ("tensor", tensor),
        ("flow", flow),
        ("refused_if", refused_if),
        ("refusal", refusal),
    ]
}

/// The Python or JavaScript source of a stage (pre- and postprocess share one).
fn script_source(stage: NewStage, python: bool) -> &'static str {
    match (stage == NewStage::Predict, python) {
        (true, true) => include_str!("../../templates/python/predict.py"),
        (false, true) => include_str!("../../templates/python/check.py"),
        (true, false) => include_str!("../../templates/js/predict.js"),
        (false, false) => include_str!("../../templates/js/check.js"),
    }
}

/// The tool `name` as this repository's scripts/toolchains.sh installed it, else as found
/// on the PATH.
fn installed_tool(name: &str) -> String {
    let installed = repository().join("target/toolchains/bin").join(name);
    if installed.exists() {
        absolute_text(&None, installed)
    } else {
        name.to_owned()
    }
}

/// The `stage WORLD SOURCE STAGE` lines a C, C++, Python or JavaScript build.sh runs, one
/// per built stage, `source` naming each stage's source as its compiler wants it.
fn stage_lines(stages: &[NewStage], source: impl Fn(NewStage) -> String) -> String {
    stages
        .iter()
        .map(|s| format!("stage {} {} {}", s.world(), source(*s), s.as_str()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The `sdk` and `wit` values of a build.sh: the project's, or this repository's
/// `sdk_folder` and `wit/`.
fn sdk_and_wit(project: &NewProject, sdk_folder: &str) -> [(&'static str, String); 2] {
    let repository = repository();
    [
        ("sdk", absolute_text(&project.sdk, repository.join(sdk_folder))),
        ("wit", absolute_text(&project.wit, repository.join("wit"))),
    ]
}

/// `path`, or `default`, as an absolute path's text (build scripts run from anywhere).
fn absolute_text(path: &Option<PathBuf>, default: PathBuf) -> String {
    let path = path.clone().unwrap_or(default);
    std::path::absolute(&path).unwrap_or(path).display().to_string()
}

/// The files of `project`, filled in.
fn files(project: &NewProject) -> Vec<File> {
    let name = project.name.as_str();
    let crate_name = name.replace('-', "_");
    let repository = repository();
    let stage = project.stage;
    let stages = built_stages(stage);
    let mut values: Vec<(&str, String)> = check_values(stage).map(|(k, v)| (k, v.to_owned())).into();
    values.extend([
        ("name", name.to_owned()),
        ("stage", stage.as_str().to_owned()),
        ("what", stage.what().to_owned()),
        ("rejected", stage.rejected().to_owned()),
        (
            "stages",
            stages
                .iter()
                .map(|s| format!("{0} = \"{0}.wasm\"", s.as_str()))
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        ("world", stage.world().to_owned()),
    ]);
    let mut templates: Vec<(String, &str)> = Vec::new();
    let (language, source) = match project.language {
        NewLanguage::Rust => {
            let companion = stage != NewStage::Predict;
            let mut artifacts = vec![format!("{crate_name}:{}", stage.as_str())];
            if companion {
                artifacts.push(format!("{crate_name}_predict:predict"));
                templates.push((
                    "predict/Cargo.toml".into(),
                    include_str!("../../templates/rust/predict-Cargo.toml"),
                ));
                templates.push(("predict/src/lib.rs".into(), rust_source(NewStage::Predict)));
            }
            values.extend([
                ("sdk", absolute_text(&project.sdk, repository.join("guest-sdk"))),
                ("members", if companion { "\"predict\"" } else { "" }.to_owned()),
                ("artifacts", artifacts.join(" ")),
            ]);
            templates.extend([
                ("Cargo.toml".into(), include_str!("../../templates/rust/Cargo.toml")),
                // The repository's lock: the same dependency versions as its examples,
                // so a build needs no registry and reuses a shared target folder's.
                ("Cargo.lock".into(), include_str!("../../../examples/Cargo.lock")),
                (
                    ".cargo/config.toml".into(),
                    include_str!("../../templates/rust/config.toml"),
                ),
                ("build.sh".into(), include_str!("../../templates/rust/build.sh")),
                ("src/lib.rs".into(), rust_source(stage)),
            ]);
            ("Rust", "src/lib.rs".to_owned())
        }
        NewLanguage::C | NewLanguage::Cpp => {
            let cpp = project.language == NewLanguage::Cpp;
            let (sdk, ext, compiler, std, header) = if cpp {
                (
                    "sdk/cpp",
                    "cpp",
                    "clang++-19",
                    "-std=c++23 -fno-exceptions",
                    "tensorplug.hpp",
                )
            } else {
                ("sdk/c", "c", "clang-19", "-std=c17", "tensorplug.h")
            };
            let wit_bindgen = installed_tool("wit-bindgen");
            for s in &stages {
                templates.push((format!("{}.{ext}", s.as_str()), c_source(*s, cpp)));
            }
            templates.push(("build.sh".into(), include_str!("../../templates/c/build.sh")));
            values.extend(sdk_and_wit(project, sdk));
            values.extend([
                ("wit_bindgen", wit_bindgen),
                ("compiler", compiler.to_owned()),
                ("std", std.to_owned()),
                ("header", header.to_owned()),
                ("bindgen_lang", ext.to_owned()),
                ("ext", ext.to_owned()),
                ("stage_lines", stage_lines(&stages, |s| format!("{}.{ext}", s.as_str()))),
                ("cpp_needs", if cpp { ", libc++ for wasm32" } else { "" }.to_owned()),
            ]);
            (if cpp { "C++" } else { "C" }, format!("{}.{ext}", stage.as_str()))
        }
        NewLanguage::Python | NewLanguage::Js => {
            let python = project.language == NewLanguage::Python;
            let (ext, sdk, build, tool) = if python {
                (
                    "py",
                    "sdk/python",
                    include_str!("../../templates/python/build.sh"),
                    "componentize-py",
                )
            } else {
                (
                    "js",
                    "sdk/js",
                    include_str!("../../templates/js/build.sh"),
                    "componentize-js",
                )
            };
            for s in &stages {
                templates.push((format!("{}.{ext}", s.as_str()), script_source(*s, python)));
            }
            templates.push(("build.sh".into(), build));
            values.extend(sdk_and_wit(project, sdk));
            values.extend([
                (
                    if python { "componentize_py" } else { "componentize_js" },
                    installed_tool(tool),
                ),
                // Python names a module, JavaScript a file.
                (
                    "stage_lines",
                    stage_lines(&stages, |s| match python {
                        true => s.as_str().to_owned(),
                        false => format!("{}.js", s.as_str()),
                    }),
                ),
            ]);
            (
                if python { "Python" } else { "JavaScript" },
                format!("{}.{ext}", stage.as_str()),
            )
        }
    };
    // What an instance of each language needs: SpiderMonkey's heap grows to ~80 MiB
    // under steady load before its collector holds it there (benches/languages.rs).
    let (memory_mib, memory_why) = match project.language {
        NewLanguage::Js => ("128", "SpiderMonkey's heap settles at ~80 MiB under load"),
        NewLanguage::Python => ("64", "CPython's heap (~13 MiB at start) included"),
        NewLanguage::Rust | NewLanguage::C | NewLanguage::Cpp => ("64", "the default"),
    };
    values.push(("memory_mib", memory_mib.to_owned()));
    values.push(("memory_why", memory_why.to_owned()));
    values.push(("language", language.to_owned()));
    values.push(("source", source));
    templates.push((
        format!("models/{name}/model.toml"),
        include_str!("../../templates/common/model.toml"),
    ));
    templates.push(("README.md".into(), include_str!("../../templates/common/README.md")));
    let values: Vec<(&str, &str)> = values.iter().map(|(k, v)| (*k, v.as_str())).collect();
    templates
        .into_iter()
        .map(|(path, text)| File {
            executable: path.ends_with(".sh"),
            text: if path == "Cargo.lock" {
                text.to_owned()
            } else {
                fill(text, &values)
            },
            path,
        })
        .collect()
}

/// Makes the project folder `parent/name` and writes its files; returns the folder.
pub fn scaffold(project: &NewProject) -> Result<PathBuf, NewError> {
    validate_name(&project.name)?;
    let root = project.parent.join(&project.name);
    let write_error = |path: &Path| {
        let path = path.to_owned();
        move |source| NewError::Write { path, source }
    };
    // create_dir (not create_dir_all) fails on an existing folder: nothing is overwritten.
    match std::fs::create_dir(&root) {
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => return Err(NewError::Exists(root)),
        other => other.map_err(write_error(&root))?,
    }
    for file in files(project) {
        let path = root.join(&file.path);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(write_error(dir))?;
        }
        std::fs::write(&path, &file.text).map_err(write_error(&path))?;
        if file.executable {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).map_err(write_error(&path))?;
        }
    }
    Ok(root)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_names_must_be_crate_and_model_names() {
        for good in ["a", "my-plugin", "doubler_2"] {
            assert!(validate_name(good).is_ok(), "{good}");
        }
        for bad in ["", "2x", "My", "a b", "a/b", "../a", "-a", "é", &"a".repeat(65)] {
            let error = validate_name(bad).unwrap_err().to_string();
            assert!(error.contains("not a valid plugin name"), "{bad}: {error}");
        }
    }

    #[test]
    fn new_fill_replaces_every_known_key() {
        let text = fill("{{a}}-{{b}} {{a}} {{c}}", &[("a", "x"), ("b", "y")]);
        assert_eq!(text, "x-y x {{c}}");
    }

    #[test]
    fn new_leaves_no_placeholder_and_refuses_an_existing_folder() {
        let parent = tempfile::tempdir().unwrap();
        let languages = [
            ("r", NewLanguage::Rust),
            ("c", NewLanguage::C),
            ("cpp", NewLanguage::Cpp),
            ("py", NewLanguage::Python),
            ("js", NewLanguage::Js),
        ];
        let stages = [NewStage::Preprocess, NewStage::Predict, NewStage::Postprocess];
        for ((language_name, language), stage) in languages.into_iter().flat_map(|l| stages.map(|s| (l, s))) {
            let name = format!("{language_name}-{}", stage.as_str());
            let project = NewProject::new(&name, stage, language, parent.path());
            let root = scaffold(&project).unwrap();
            let model = std::fs::read_to_string(root.join(format!("models/{name}/model.toml"))).unwrap();
            assert!(
                model.contains(&format!("{0} = \"{0}.wasm\"", stage.as_str())),
                "{model}"
            );
            assert!(model.contains("predict = \"predict.wasm\""), "{model}");
            for file in files(&project) {
                assert!(!file.text.contains("{{"), "{name}: {} keeps a placeholder", file.path);
                assert!(root.join(&file.path).is_file(), "{}", file.path);
            }
            let again = scaffold(&project).unwrap_err();
            assert!(matches!(again, NewError::Exists(_)), "{again}");
        }
        let bad = scaffold(&NewProject::new(
            "Bad Name",
            NewStage::Predict,
            NewLanguage::Rust,
            parent.path(),
        ))
        .unwrap_err();
        assert!(matches!(bad, NewError::InvalidName(_)), "{bad}");
        assert!(!parent.path().join("Bad Name").exists());
    }
}

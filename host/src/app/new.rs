//! `tensorplug new`: scaffolds a plugin project (sources, a build script, a model folder
//! and a README) from the templates under `host/templates/`, embedded in the binary.
//!
//! A project `NAME/` builds with `./build.sh` into the model folder `NAME/models/NAME/`,
//! which `tensorplug serve NAME/models` serves as generated. Where the SDK, the WIT folder
//! and wit-bindgen are defaults to this repository's, known at compile time.

use std::path::{Path, PathBuf};

/// The stage a project implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum NewStage {
    Predict,
}

/// The language a project is written in (python and js come with their toolchains).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum NewLanguage {
    Rust,
    C,
    Cpp,
}

/// What to scaffold, and where.
#[derive(Clone, Debug)]
pub struct NewProject {
    pub name: String,
    pub stage: NewStage,
    pub language: NewLanguage,
    /// The folder the project folder is made in.
    pub parent: PathBuf,
    /// Rust: the guest SDK crate; C and C++: the folder holding the SDK header.
    pub sdk: Option<PathBuf>,
    /// C and C++: the WIT folder bindings are generated from.
    pub wit: Option<PathBuf>,
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
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
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

/// The files of `project`, filled in.
fn files(project: &NewProject) -> Vec<File> {
    let name = project.name.as_str();
    let crate_name = name.replace('-', "_");
    let repository = repository();
    let path_text = |path: &Option<PathBuf>, default: PathBuf| {
        let path = path.clone().unwrap_or(default);
        std::path::absolute(&path).unwrap_or(path).display().to_string()
    };
    let stage = "predict";
    let what = "`y = 2 * x` per item.";
    let mut values = vec![
        ("name", name.to_owned()),
        ("crate", crate_name),
        ("stage", stage.to_owned()),
        ("what", what.to_owned()),
        ("stages", format!("{stage} = \"{stage}.wasm\"")),
    ];
    let (language, source, templates): (&str, &str, Vec<(&str, &str)>) = match project.language {
        NewLanguage::Rust => {
            values.push(("sdk", path_text(&project.sdk, repository.join("guest-sdk"))));
            (
                "Rust",
                "src/lib.rs",
                vec![
                    ("Cargo.toml", include_str!("../../templates/rust/Cargo.toml")),
                    (".cargo/config.toml", include_str!("../../templates/rust/config.toml")),
                    ("build.sh", include_str!("../../templates/rust/build.sh")),
                    ("src/lib.rs", include_str!("../../templates/rust/predict.rs")),
                ],
            )
        }
        NewLanguage::C | NewLanguage::Cpp => {
            let cpp = project.language == NewLanguage::Cpp;
            let (sdk, source, compiler, std, header, bindgen, ext) = if cpp {
                (
                    "sdk/cpp",
                    "predict.cpp",
                    "clang++-19",
                    "-std=c++23 -fno-exceptions",
                    "tensorplug.hpp",
                    "cpp",
                    "cpp",
                )
            } else {
                ("sdk/c", "predict.c", "clang-19", "-std=c17", "tensorplug.h", "c", "c")
            };
            let wit_bindgen = repository.join("target/toolchains/bin/wit-bindgen");
            let wit_bindgen = if wit_bindgen.exists() {
                path_text(&None, wit_bindgen)
            } else {
                "wit-bindgen".to_owned()
            };
            values.extend([
                ("sdk", path_text(&project.sdk, repository.join(sdk))),
                ("wit", path_text(&project.wit, repository.join("wit"))),
                ("wit_bindgen", wit_bindgen),
                ("world", "predictor".to_owned()),
                ("compiler", compiler.to_owned()),
                ("std", std.to_owned()),
                ("header", header.to_owned()),
                ("bindgen_lang", bindgen.to_owned()),
                ("ext", ext.to_owned()),
                ("source", source.to_owned()),
                ("cpp_needs", if cpp { ", libc++ for wasm32" } else { "" }.to_owned()),
            ]);
            let code = if cpp {
                include_str!("../../templates/cpp/predict.cpp")
            } else {
                include_str!("../../templates/c/predict.c")
            };
            (
                if cpp { "C++" } else { "C" },
                source,
                vec![("build.sh", include_str!("../../templates/c/build.sh")), (source, code)],
            )
        }
    };
    values.push(("language", language.to_owned()));
    values.push(("source", source.to_owned()));
    let values: Vec<(&str, &str)> = values.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut out: Vec<File> = templates
        .into_iter()
        .map(|(path, text)| File {
            path: path.to_owned(),
            text: fill(text, &values),
            executable: path.ends_with(".sh"),
        })
        .collect();
    out.push(File {
        path: format!("models/{name}/model.toml"),
        text: fill(include_str!("../../templates/common/model.toml"), &values),
        executable: false,
    });
    out.push(File {
        path: "README.md".to_owned(),
        text: fill(include_str!("../../templates/common/README.md"), &values),
        executable: false,
    });
    out
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

    fn project(name: &str, language: NewLanguage, parent: &Path) -> NewProject {
        NewProject {
            name: name.into(),
            stage: NewStage::Predict,
            language,
            parent: parent.into(),
            sdk: None,
            wit: None,
        }
    }

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
        for (name, language) in [
            ("r", NewLanguage::Rust),
            ("c", NewLanguage::C),
            ("cpp", NewLanguage::Cpp),
        ] {
            let root = scaffold(&project(name, language, parent.path())).unwrap();
            assert!(root.join(format!("models/{name}/model.toml")).is_file());
            for file in files(&project(name, language, parent.path())) {
                assert!(!file.text.contains("{{"), "{name}: {} keeps a placeholder", file.path);
                assert!(root.join(&file.path).is_file(), "{}", file.path);
            }
            let again = scaffold(&project(name, language, parent.path())).unwrap_err();
            assert!(matches!(again, NewError::Exists(_)), "{again}");
        }
        let bad = scaffold(&project("Bad Name", NewLanguage::Rust, parent.path())).unwrap_err();
        assert!(matches!(bad, NewError::InvalidName(_)), "{bad}");
        assert!(!parent.path().join("Bad Name").exists());
    }
}

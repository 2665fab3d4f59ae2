//! `tensorplug compile`: fills the compile cache for a whole repository ahead of time, so
//! that loading a model (on its first request, under on-demand residency) reads its
//! compiled stages back instead of compiling them.

use std::path::Path;
use std::sync::Mutex;

use crate::model::config::ModelConfig;
use crate::runtime::{precompile, CompileSource, Runtime};

/// One model folder's stages, compiled (or not).
pub struct Compiled {
    pub name: String,
    /// Each stage's report (`predict 1.204 s (compiled)`), or what is wrong with the model.
    pub result: Result<Vec<String>, String>,
    /// Stages compiled afresh (the others were in the cache already).
    pub compiled: usize,
}

/// Compiles every stage of every model folder under `repository` into `runtime`'s cache,
/// on every core; one entry per model folder, sorted by name.
pub fn compile_repository(repository: &Path, runtime: &Runtime) -> std::io::Result<Vec<Compiled>> {
    let mut names: Vec<String> = std::fs::read_dir(repository)?
        .filter_map(Result::ok)
        .filter(|entry| entry.path().join(crate::model::config::MODEL_FILE).exists())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| crate::model::config::is_valid_model_name(name))
        .collect();
    names.sort();
    let next = Mutex::new(names.iter());
    let done = Mutex::new(Vec::with_capacity(names.len()));
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let Some(name) = crate::sync::lock(&next).next() else {
                    break;
                };
                let compiled = compile_model(repository, name, runtime);
                crate::sync::lock(&done).push(compiled);
            });
        }
    });
    let mut done = done.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
    done.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(done)
}

fn compile_model(repository: &Path, name: &str, runtime: &Runtime) -> Compiled {
    let mut compiled = 0;
    let result = ModelConfig::load(&repository.join(name))
        .map_err(|e| e.to_string())
        .and_then(|config| {
            config
                .stages
                .iter()
                .map(|(kind, file)| {
                    let report = precompile(runtime, file, config.limits.compile_timeout)
                        .map_err(|e| format!("{}: {e}", kind.name()))?;
                    let source = match report.source {
                        CompileSource::Compiled => {
                            compiled += 1;
                            "compiled"
                        }
                        CompileSource::Cache => "in the cache already",
                        CompileSource::CompiledOrCache => "compiled or in the cache",
                        CompileSource::LoadedStage => "shared with another stage",
                    };
                    Ok(format!("{} {:.3} s ({source})", kind.name(), report.took.as_secs_f64()))
                })
                .collect()
        });
    Compiled {
        name: name.to_owned(),
        result,
        compiled,
    }
}

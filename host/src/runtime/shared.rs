//! What the instances of one model version share through the host: the metrics and the
//! metadata their plugins declare, and the `wasi:nn` graphs of its `[graphs]`; and how its
//! stages compiled. Made afresh for every version, so a reload starts
//! them anew and an unload takes them away.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use super::compile::CompileReport;
use super::memory::{CodeShare, InstanceMemory};
use super::nn::ModelGraphs;
use super::plugin_metrics::PluginMetrics;

/// Keys one model may declare.
pub const MAX_METADATA_KEYS: usize = 32;
/// Longest metadata key.
pub const MAX_METADATA_KEY_BYTES: usize = 64;
/// Longest metadata value.
pub const MAX_METADATA_VALUE_BYTES: usize = 4096;

/// What one stage's inits declared, by key.
pub type Declared = BTreeMap<String, String>;

/// The state a model version's plugins share.
#[derive(Debug, Default)]
pub struct ModelShared {
    pub metrics: PluginMetrics,
    /// Per stage, what its first successful `init` declared: fixed from then on.
    metadata: Mutex<BTreeMap<&'static str, Declared>>,
    /// Later inits that declared other metadata than their stage's first (ignored).
    metadata_changes_ignored: AtomicU64,
    /// Parsed, optimised and runnable once per version; every instance runs them.
    pub graphs: ModelGraphs,
    /// Each stage's compile, by stage name in pipeline order; set once they all compiled.
    pub compiles: OnceLock<Vec<(&'static str, CompileReport)>>,
    /// Its instances' linear memories and tables, kept current by their stores.
    pub memory: InstanceMemory,
    /// The compiled components its stages run from.
    pub code: CodeShare,
}

/// A later `init` declared other metadata than the first one of its stage: what differs.
#[derive(Debug, PartialEq, Eq)]
pub struct MetadataChange {
    /// The keys whose values differ, or that only one of the two inits declared.
    pub keys: Vec<String>,
}

impl ModelShared {
    /// The shared state of a version whose graphs are `graphs`.
    pub fn with_graphs(graphs: ModelGraphs) -> Self {
        Self {
            graphs,
            ..Self::default()
        }
    }

    /// Checks that `stage`'s init, which has declared `declared` so far, may declare
    /// `key` = `value` (it is then recorded in `declared`; the last value for a key wins),
    /// or says which rule it breaks.
    pub fn check_metadata(
        &self,
        stage: &'static str,
        declared: &mut Declared,
        key: &str,
        value: String,
    ) -> Result<(), String> {
        let valid = key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
        if key.is_empty() || key.len() > MAX_METADATA_KEY_BYTES || !valid {
            return Err(format!(
                "'{}' is not a valid metadata key: 1-{MAX_METADATA_KEY_BYTES} characters of [a-zA-Z0-9_.-]",
                crate::model::text::clip(key)
            ));
        }
        if value.len() > MAX_METADATA_VALUE_BYTES {
            return Err(format!(
                "metadata '{key}': the value has {} bytes; at most {MAX_METADATA_VALUE_BYTES}",
                value.len()
            ));
        }
        if !declared.contains_key(key) {
            // The other stages' keys count too: the cap is the model's.
            let others: usize = self
                .lock()
                .iter()
                .filter(|(other, _)| **other != stage)
                .map(|(_, keys)| keys.len())
                .sum();
            if others + declared.len() >= MAX_METADATA_KEYS {
                return Err(format!(
                    "metadata '{key}': a model may declare at most {MAX_METADATA_KEYS} keys"
                ));
            }
        }
        declared.insert(key.to_owned(), value);
        Ok(())
    }

    /// Settles what a successful `init` of `stage` declared. The first one of each stage
    /// declares the version's metadata; later ones (more instances, replacements after a
    /// trap) may only repeat it: a difference is returned, and changes nothing.
    pub fn settle_metadata(&self, stage: &'static str, declared: Declared) -> Result<(), MetadataChange> {
        let mut metadata = self.lock();
        let Some(first) = metadata.get(stage) else {
            metadata.insert(stage, declared);
            return Ok(());
        };
        if *first == declared {
            return Ok(());
        }
        let keys = first
            .keys()
            .chain(declared.keys())
            .filter(|key| first.get(*key) != declared.get(*key))
            .map(|key| crate::model::text::clip(key).to_string())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        self.metadata_changes_ignored.fetch_add(1, Ordering::Relaxed);
        Err(MetadataChange { keys })
    }

    /// What the version holds in memory, measured: its instances' linear memories and
    /// tables, its share of its stages' compiled code, and its graphs.
    pub fn held_bytes(&self) -> u64 {
        (self.memory.bytes() as u64)
            .saturating_add(self.code.bytes() as u64)
            .saturating_add(self.graphs.bytes())
    }

    /// How many later inits declared other metadata than their stage's first.
    pub fn metadata_changes_ignored(&self) -> u64 {
        self.metadata_changes_ignored.load(Ordering::Relaxed)
    }

    /// Every key and value declared, sorted by key (a key two stages declare: the later
    /// stage's value).
    pub fn metadata(&self) -> BTreeMap<String, String> {
        let metadata = self.lock();
        let mut merged = BTreeMap::new();
        for stage in ["preprocess", "predict", "postprocess"] {
            if let Some(declared) = metadata.get(stage) {
                merged.extend(declared.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
        }
        merged
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<&'static str, Declared>> {
        crate::sync::lock(&self.metadata)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_is_validated_and_bounded() {
        let shared = ModelShared::default();
        let mut declared = Declared::new();
        let mut declare = |key: &str, value: String| shared.check_metadata("predict", &mut declared, key, value);
        declare("labels", "a,b".into()).unwrap();
        declare("labels", "c".into()).unwrap();
        assert!(declare("", "x".into()).is_err());
        assert!(declare("a b", "x".into()).is_err());
        assert!(declare(&"k".repeat(65), "x".into()).is_err());
        let error = declare("big", "v".repeat(4097)).unwrap_err();
        assert!(error.contains("4097 bytes"), "{error}");
        for i in 1..MAX_METADATA_KEYS {
            declare(&format!("k{i}"), String::new()).unwrap();
        }
        let error = declare("one.more", String::new()).unwrap_err();
        assert!(error.contains("at most 32 keys"), "{error}");
        declare("labels", "again".into()).unwrap();
        shared.settle_metadata("predict", declared).unwrap();
        assert_eq!(shared.metadata()["labels"], "again", "the last value wins");
        let error = shared
            .check_metadata("preprocess", &mut Declared::new(), "another", String::new())
            .unwrap_err();
        assert!(error.contains("at most 32 keys"), "the cap is the model's: {error}");
    }

    #[test]
    fn the_first_successful_init_of_each_stage_fixes_its_metadata() {
        let shared = ModelShared::default();
        let declared = |pairs: &[(&str, &str)]| -> Declared {
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
        };
        shared
            .settle_metadata("predict", declared(&[("seed", "1"), ("scale", "2")]))
            .unwrap();
        shared
            .settle_metadata("preprocess", declared(&[("labels", "a,b")]))
            .unwrap();
        shared
            .settle_metadata("predict", declared(&[("scale", "2"), ("seed", "1")]))
            .unwrap();
        let change = shared
            .settle_metadata("predict", declared(&[("seed", "9"), ("scale", "2"), ("new", "x")]))
            .unwrap_err();
        assert_eq!(change.keys, vec!["new".to_string(), "seed".to_string()]);
        assert!(shared.settle_metadata("predict", Declared::new()).is_err());
        let metadata = shared.metadata();
        assert_eq!(metadata["seed"], "1");
        assert_eq!(metadata["labels"], "a,b");
        assert!(!metadata.contains_key("new"));
    }
}

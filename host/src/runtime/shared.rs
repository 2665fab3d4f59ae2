//! What the instances of one model version share through the host: the metrics and the
//! metadata their plugins declare, and the `wasi:nn` graphs of its `[graphs]`. Made afresh for every version, so a reload starts
//! them anew and an unload takes them away.

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::nn::ModelGraphs;
use super::plugin_metrics::PluginMetrics;

/// Keys one model may declare.
pub const MAX_METADATA_KEYS: usize = 32;
/// Longest metadata key.
pub const MAX_METADATA_KEY_BYTES: usize = 64;
/// Longest metadata value.
pub const MAX_METADATA_VALUE_BYTES: usize = 4096;

/// The state a model version's plugins share.
#[derive(Debug, Default)]
pub struct ModelShared {
    pub metrics: PluginMetrics,
    metadata: Mutex<BTreeMap<String, String>>,
    /// Parsed, optimised and runnable once per version; every instance runs them.
    pub graphs: ModelGraphs,
}

impl ModelShared {
    /// The shared state of a version whose graphs are `graphs`.
    pub fn with_graphs(graphs: ModelGraphs) -> Self {
        Self {
            graphs,
            ..Self::default()
        }
    }

    /// Records `key` = `value` (the last value for a key wins), or says which rule it breaks.
    pub fn declare_metadata(&self, key: &str, value: String) -> Result<(), String> {
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
        let mut metadata = self.metadata.lock().unwrap_or_else(|e| e.into_inner());
        if !metadata.contains_key(key) && metadata.len() >= MAX_METADATA_KEYS {
            return Err(format!(
                "metadata '{key}': a model may declare at most {MAX_METADATA_KEYS} keys"
            ));
        }
        metadata.insert(key.to_owned(), value);
        Ok(())
    }

    /// Every key and value declared, sorted by key.
    pub fn metadata(&self) -> BTreeMap<String, String> {
        self.metadata.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_is_validated_and_bounded() {
        let shared = ModelShared::default();
        shared.declare_metadata("labels", "a,b".into()).unwrap();
        shared.declare_metadata("labels", "c".into()).unwrap();
        assert_eq!(shared.metadata()["labels"], "c", "the last value wins");
        assert!(shared.declare_metadata("", "x".into()).is_err());
        assert!(shared.declare_metadata("a b", "x".into()).is_err());
        assert!(shared.declare_metadata(&"k".repeat(65), "x".into()).is_err());
        let error = shared.declare_metadata("big", "v".repeat(4097)).unwrap_err();
        assert!(error.contains("4097 bytes"), "{error}");
        for i in 1..MAX_METADATA_KEYS {
            shared.declare_metadata(&format!("k{i}"), String::new()).unwrap();
        }
        let error = shared.declare_metadata("one.more", String::new()).unwrap_err();
        assert!(error.contains("at most 32 keys"), "{error}");
        shared.declare_metadata("labels", "again".into()).unwrap();
    }
}

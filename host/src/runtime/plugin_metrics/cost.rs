//! How many bytes of `/metrics` a plugin's family or series can take at most, known when
//! it is created: names and escaped labels are fixed from then on, and every value has a
//! bounded width. Counting at creation keeps updates free of any accounting.

use super::page::PREFIX;
use super::Kind;
use crate::model::openmetrics::escaped_len;

/// The widest value a sample line can carry (an `f64` or `u64` as the encoder writes it,
/// `-2.2250738585072014e-308` is 24 bytes), with the space before it and the newline.
const VALUE_BYTES: usize = 34;
/// The widest `le` label of a plugin histogram's bucket (`,le="0.005"`, `,le="+Inf"`).
const LE_BYTES: usize = 14;
/// A family's `# HELP` and `# TYPE` lines beyond twice its name.
const HEADER_BYTES: usize = 100;

/// The bytes of `model="…",version="…",` for a model version.
pub fn host_label_bytes(model: &str, version: &str) -> usize {
    "model=\"\",version=\"\",".len() + escaped_len(model) + escaped_len(version)
}

/// The bytes of a family's header lines (charged to every model that uses the name:
/// the page holds it once, so this over-counts, never under).
pub fn family_bytes(name: &str) -> usize {
    2 * (PREFIX.len() + name.len()) + HEADER_BYTES
}

/// The bytes of one series of `kind` in the family `name`, labelled with the host's
/// labels (`host_labels` bytes) and `labels`.
pub fn series_bytes(name: &str, kind: Kind, host_labels: usize, labels: &[(String, String)]) -> usize {
    let labels: usize = host_labels
        + labels
            .iter()
            .map(|(name, value)| name.len() + "=\"\",".len() + escaped_len(value))
            .sum::<usize>();
    // `name{labels}`, before the suffix and the value.
    let line = PREFIX.len() + name.len() + "{}".len() + labels;
    match kind {
        Kind::Counter => line + "_total".len() + VALUE_BYTES,
        Kind::Gauge => line + VALUE_BYTES,
        Kind::Histogram => {
            let buckets = super::HISTOGRAM_BUCKETS.len() + 1;
            buckets * (line + "_bucket".len() + LE_BYTES + VALUE_BYTES)
                + (line + "_sum".len() + VALUE_BYTES)
                + (line + "_count".len() + VALUE_BYTES)
        }
    }
}

//! Faults -30 to -39: plugin metrics written to forge, break or bloat `/metrics`.
//!
//! | x | fault |
//! | --- | --- |
//! | -30 | counter `forged` with label values that would write lines of their own unescaped: `"`, `\`, a newline, `# EOF`, another model's `tensorplug_model_ready` (accepted, escaped) |
//! | -31 | a label value with a carriage return; the host's refusal becomes the item's 422 |
//! | -32 | counter `clash`, then gauge `clash_total` (its sample's name); the refusal becomes the item's 422 |
//! | -33 | histogram `hist`, then gauges `hist_count`, `hist_sum`, `hist_bucket`; the refusals become the item's 422 |
//! | -34 | counter `cross` (another model then tries the name with another kind) |
//! | -35 | gauge `cross_total` and histogram `cross`; the refusals become the item's 422 |
//! | -36 | gauge `metrics_refused` (the host's own name); the refusal becomes the item's 422 |
//! | -37 | histograms with 8 long labels whose values are all quotes, until the host refuses; the refusal becomes the item's 422 |

use tensorplug_guest::prelude::*;

/// Label values that would end their quotes, their line or the page if written raw.
const FORGERIES: [&str; 6] = [
    "\"",
    "\\",
    "a\nb",
    "# EOF",
    "} 0\ntensorplug_model_ready{model=\"digits\"} 0",
    "\"} 1\n# TYPE tensorplug_model_ready counter\ntensorplug_model_ready_total{model=\"digits\"} 7\n# EOF\n",
];

/// Runs the fault `code` (30..=39), if it is one of these; the item's error, if any.
pub(crate) fn run(code: u8) -> Option<ItemError> {
    let refused = |result: Result<(), String>| result.err();
    let errors: Vec<String> = match code {
        30 => FORGERIES
            .iter()
            .filter_map(|v| refused(metrics::counter_add("forged", &[("v", v)], 1.0)))
            .collect(),
        31 => refused(metrics::gauge_set("carriage", &[("v", "a\rb")], 1.0))
            .into_iter()
            .collect(),
        32 => [
            metrics::counter_add("clash", &[], 1.0),
            metrics::gauge_set("clash_total", &[], 1.0),
        ]
        .into_iter()
        .filter_map(refused)
        .collect(),
        33 => [
            metrics::histogram_observe("hist", &[], 0.1),
            metrics::gauge_set("hist_count", &[], 1.0),
            metrics::gauge_set("hist_sum", &[], 1.0),
            metrics::gauge_set("hist_bucket", &[], 1.0),
        ]
        .into_iter()
        .filter_map(refused)
        .collect(),
        34 => refused(metrics::counter_add("cross", &[], 1.0)).into_iter().collect(),
        35 => [
            metrics::gauge_set("cross_total", &[], 1.0),
            metrics::histogram_observe("cross", &[], 1.0),
        ]
        .into_iter()
        .filter_map(refused)
        .collect(),
        36 => refused(metrics::gauge_set("metrics_refused", &[], 1.0))
            .into_iter()
            .collect(),
        37 => flood().into_iter().collect(),
        _ => return None,
    };
    (!errors.is_empty()).then(|| ItemError::new(422, errors.join("; ")))
}

/// Fills the page with the largest series the count caps allow, until the host refuses.
fn flood() -> Option<String> {
    let names: Vec<String> = (0..8).map(|l| format!("label_{l}_{}", "n".repeat(50))).collect();
    let value = "\"".repeat(128);
    for family in 0..32 {
        for series in 0..64 {
            let first = format!("{series:03}{}", "\"".repeat(125));
            let labels: Vec<(&str, &str)> = names
                .iter()
                .enumerate()
                .map(|(l, name)| (name.as_str(), if l == 0 { first.as_str() } else { value.as_str() }))
                .collect();
            if let Err(error) = metrics::histogram_observe(&format!("flood_{family}"), &labels, 0.5) {
                return Some(error);
            }
        }
    }
    None
}

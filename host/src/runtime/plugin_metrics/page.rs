//! What the plugins of every model may put on `/metrics`, server-wide: the family names
//! they have claimed (with every sample name each one writes) and the bytes they may add.
//!
//! A family name on the page has one type, whichever models use it, and the text format
//! derives sample names from it (`x` → `x_total`, `y` → `y_bucket`, `y_count`, ...), so
//! two names can clash although they differ. Names are claimed when a model first uses
//! them, and a claim that would clash with another (this model's, another model's, or
//! the host's own names under `tensorplug_plugin_`) is refused: the page then never holds
//! two families that a reader would confuse, and no model can change the type of, or
//! drop, the series another model already has. A claim lasts as long as a model version
//! that made it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::Kind;

/// Every plugin family's name on the page starts with this.
pub const PREFIX: &str = "tensorplug_plugin_";

/// The host's own families under [`PREFIX`] (their names without it), which plugins may
/// not claim; no other host family starts with the prefix.
pub const HOST_FAMILIES: [(&str, Kind); 1] = [(super::REFUSED_FAMILY, Kind::Counter)];

/// Default cap of the bytes one model version's plugin metrics may add to the page.
pub const DEFAULT_BYTES_PER_MODEL: usize = 1 << 20;
/// Default cap of the bytes all models' plugin metrics may add to the page.
pub const DEFAULT_BYTES_TOTAL: usize = 16 << 20;

/// The suffixes the text format appends to a family's name for its samples ("" is the
/// name itself), as OpenMetrics readers derive them.
fn suffixes(kind: Kind) -> &'static [&'static str] {
    match kind {
        Kind::Counter => &["", "_total", "_created"],
        Kind::Gauge => &[""],
        Kind::Histogram => &["", "_bucket", "_count", "_sum", "_created"],
    }
}

/// The bytes caps, by name as in the refusals.
#[derive(Clone, Copy, Debug)]
pub struct PageLimits {
    /// `plugin_metrics_bytes_per_model`.
    pub bytes_per_model: usize,
    /// `plugin_metrics_bytes_total`.
    pub bytes_total: usize,
}

impl Default for PageLimits {
    fn default() -> Self {
        Self {
            bytes_per_model: DEFAULT_BYTES_PER_MODEL,
            bytes_total: DEFAULT_BYTES_TOTAL,
        }
    }
}

#[derive(Debug, Default)]
struct Claims {
    /// A family's kind and how many model versions use it.
    families: HashMap<String, (Kind, usize)>,
    /// Every sample name a claimed family writes (the suffixed names and the name
    /// itself), and whose it is.
    samples: HashMap<String, String>,
}

impl Claims {
    fn insert(&mut self, name: &str, kind: Kind) {
        for suffix in suffixes(kind) {
            self.samples.insert(format!("{name}{suffix}"), name.to_owned());
        }
        self.families.insert(name.to_owned(), (kind, 1));
    }
}

/// The plugin metrics' share of the page, server-wide.
#[derive(Debug)]
pub struct PluginPage {
    pub limits: PageLimits,
    claims: Mutex<Claims>,
    bytes: AtomicUsize,
}

impl Default for PluginPage {
    fn default() -> Self {
        Self::new(PageLimits::default())
    }
}

impl PluginPage {
    pub fn new(limits: PageLimits) -> Self {
        let mut claims = Claims::default();
        // Never released: the host's families are always on the page.
        for (name, kind) in HOST_FAMILIES {
            claims.insert(name, kind);
        }
        Self {
            limits,
            claims: Mutex::new(claims),
            bytes: AtomicUsize::new(0),
        }
    }

    /// Claims the family `name` (without the prefix) of `kind` for one more model
    /// version, or says what it clashes with.
    pub fn claim(&self, name: &str, kind: Kind) -> Result<(), String> {
        let mut claims = crate::sync::lock(&self.claims);
        if HOST_FAMILIES.iter().any(|(host, _)| *host == name) {
            return Err(format!("metric '{name}': {PREFIX}{name} is the host's own metric"));
        }
        if let Some((claimed, users)) = claims.families.get_mut(name) {
            if *claimed != kind {
                return Err(format!(
                    "metric '{name}' is a {} on this server's /metrics (a name has one type on the page, \
                     whichever model uses it)",
                    claimed.name()
                ));
            }
            *users += 1;
            return Ok(());
        }
        for suffix in suffixes(kind) {
            let sample = format!("{name}{suffix}");
            if let Some(owner) = claims.samples.get(&sample) {
                let (owner_kind, _) = claims.families[owner];
                return Err(format!(
                    "metric '{name}' ({}) would write the sample {PREFIX}{sample}, which the {} \
                     {PREFIX}{owner} writes on /metrics: the names clash",
                    kind.name(),
                    owner_kind.name()
                ));
            }
        }
        claims.insert(name, kind);
        Ok(())
    }

    /// Gives back one model version's claim on `name`.
    pub fn release(&self, name: &str) {
        let mut claims = crate::sync::lock(&self.claims);
        let Some((kind, users)) = claims.families.get_mut(name) else {
            return;
        };
        *users -= 1;
        if *users == 0 {
            let kind = *kind;
            claims.families.remove(name);
            for suffix in suffixes(kind) {
                claims.samples.remove(&format!("{name}{suffix}"));
            }
        }
    }

    /// Takes `bytes` of the server-wide budget, or says it is spent.
    pub fn reserve(&self, bytes: usize) -> Result<(), String> {
        let total = self.limits.bytes_total;
        self.bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(bytes).filter(|&after| after <= total)
            })
            .map(|_| ())
            .map_err(|used| {
                format!(
                    "the plugin metrics of all models would take more than {total} bytes of /metrics \
                     (plugin_metrics_bytes_total; {used} taken)"
                )
            })
    }

    /// Gives back `bytes` of the server-wide budget.
    pub fn unreserve(&self, bytes: usize) {
        self.bytes.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// Bytes of the server-wide budget taken.
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_the_format_would_confuse_are_refused() {
        let page = PluginPage::default();
        page.claim("x", Kind::Counter).unwrap();
        let error = page.claim("x_total", Kind::Gauge).unwrap_err();
        assert!(
            error.contains("tensorplug_plugin_x_total") && error.contains("clash"),
            "{error}"
        );
        assert!(page.claim("x_created", Kind::Histogram).is_err());
        assert!(page.claim("x", Kind::Gauge).unwrap_err().contains("is a counter"));
        page.claim("y", Kind::Histogram).unwrap();
        for clash in ["y_count", "y_sum", "y_bucket", "y_created"] {
            assert!(page.claim(clash, Kind::Gauge).is_err(), "{clash}");
        }
        // The other way round: a gauge first, then the histogram whose samples it would be.
        page.claim("z_count", Kind::Gauge).unwrap();
        assert!(page.claim("z", Kind::Histogram).is_err());
        // A counter whose `_total` sample is another family's name.
        page.claim("w_total", Kind::Gauge).unwrap();
        assert!(page.claim("w", Kind::Counter).is_err());
        // Names that only look alike are fine.
        page.claim("y_counts", Kind::Gauge).unwrap();
        page.claim("z", Kind::Gauge).unwrap();
        page.claim("x", Kind::Counter).unwrap();
    }

    #[test]
    fn the_hosts_names_are_never_free() {
        let page = PluginPage::default();
        for kind in [Kind::Counter, Kind::Gauge, Kind::Histogram] {
            let error = page.claim("metrics_refused", kind).unwrap_err();
            assert!(error.contains("the host's"), "{error}");
        }
        let error = page.claim("metrics_refused_total", Kind::Gauge).unwrap_err();
        assert!(error.contains("clash"), "{error}");
        page.claim("metrics_refusedx", Kind::Gauge).unwrap();
    }

    #[test]
    fn a_name_is_free_again_once_every_user_let_go() {
        let page = PluginPage::default();
        page.claim("h", Kind::Histogram).unwrap();
        page.claim("h", Kind::Histogram).unwrap();
        page.release("h");
        assert!(page.claim("h_sum", Kind::Gauge).is_err(), "one user left");
        page.release("h");
        page.claim("h_sum", Kind::Gauge).unwrap();
        page.claim("h", Kind::Counter).unwrap();
    }

    #[test]
    fn the_total_budget_is_shared_and_given_back() {
        let page = PluginPage::new(PageLimits {
            bytes_per_model: 100,
            bytes_total: 250,
        });
        page.reserve(200).unwrap();
        let error = page.reserve(51).unwrap_err();
        assert!(
            error.contains("plugin_metrics_bytes_total") && error.contains("250"),
            "{error}"
        );
        page.reserve(50).unwrap();
        page.unreserve(200);
        page.reserve(200).unwrap();
        assert_eq!(page.bytes(), 250);
    }
}

//! The released versions of the `tensorplug:plugin` WIT package this host serves, which
//! one a component targets, and the imports of the older ones.
//!
//! A component names its version in every `tensorplug:plugin/...@x.y.z` import (each
//! world `use`s `types`, so every plugin has at least one). The host links the imports of
//! every version in [`WitVersion::SUPPORTED`] side by side, and calls each version's
//! exports through that version's bindings (see [`super::bindings`]); the policy is in
//! docs/plugins.md ("Compatibility").

use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::Engine;

use super::bindings::{log, v0_1_0};
use super::store::StoreState;

/// A released version of the `tensorplug:plugin` package.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WitVersion {
    V0_1_0,
    V0_2_0,
}

/// The package whose version a component's import names carry.
const PACKAGE: &str = "tensorplug:plugin/";

impl WitVersion {
    /// Every version this host links and calls, oldest first.
    pub const SUPPORTED: [WitVersion; 2] = [WitVersion::V0_1_0, WitVersion::V0_2_0];

    /// The version `wit/plugin.wit` declares: what plugins built today target.
    pub const CURRENT: WitVersion = WitVersion::V0_2_0;

    pub fn as_str(self) -> &'static str {
        match self {
            WitVersion::V0_1_0 => "0.1.0",
            WitVersion::V0_2_0 => "0.2.0",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        Self::SUPPORTED.into_iter().find(|v| v.as_str() == text)
    }

    /// The version a component targets, from its import and export names.
    pub fn of_component(component: &Component, engine: &Engine) -> Result<Self, String> {
        let ty = component.component_type();
        let names = ty
            .imports(engine)
            .map(|(name, _)| name)
            .chain(ty.exports(engine).map(|(name, _)| name));
        Self::from_names(names)
    }

    /// The version named by `tensorplug:plugin/...@x.y.z` among `names`; without such a
    /// name, the current one (linking then says what is missing).
    fn from_names<'a>(names: impl Iterator<Item = &'a str>) -> Result<Self, String> {
        let mut found: Option<&str> = None;
        for name in names {
            let Some(version) = name
                .strip_prefix(PACKAGE)
                .and_then(|rest| rest.split_once('@'))
                .map(|(_, v)| v)
            else {
                continue;
            };
            match found {
                Some(seen) if seen != version => {
                    return Err(format!(
                        "imports two versions of tensorplug:plugin ({seen} and {version}); a plugin targets one"
                    ))
                }
                _ => found = Some(version),
            }
        }
        match found {
            None => Ok(Self::CURRENT),
            Some(version) => Self::parse(version).ok_or_else(|| {
                let supported: Vec<&str> = Self::SUPPORTED.iter().map(|v| v.as_str()).collect();
                format!(
                    "was built for tensorplug:plugin@{version}, which this host does not know; it serves {} \
                     (rebuild the plugin against one of them, or run a host that knows {version})",
                    supported.join(", ")
                )
            }),
        }
    }
}

impl std::fmt::Display for WitVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Links the imports of the released versions older than [`WitVersion::CURRENT`] (the
/// current one's are linked with WASI by the engine).
pub fn add_older_versions_to_linker(linker: &mut Linker<StoreState>) -> wasmtime::Result<()> {
    v0_1_0::log::add_to_linker::<_, HasSelf<StoreState>>(linker, |state| state)
}

/// 0.1.0's `log` is the current one.
impl v0_1_0::log::Host for StoreState {
    fn log(&mut self, level: v0_1_0::log::Level, message: String) {
        use v0_1_0::log::Level as Old;
        let level = match level {
            Old::Trace => log::Level::Trace,
            Old::Debug => log::Level::Debug,
            Old::Info => log::Level::Info,
            Old::Warn => log::Level::Warn,
            Old::Error => log::Level::Error,
        };
        log::Host::log(self, level, message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_comes_from_the_package_names() {
        let old = [
            "wasi:cli/environment@0.2.4",
            "tensorplug:plugin/types@0.1.0",
            "tensorplug:plugin/log@0.1.0",
        ];
        assert_eq!(WitVersion::from_names(old.into_iter()), Ok(WitVersion::V0_1_0));
        let new = ["tensorplug:plugin/types@0.2.0", "wasi:nn/graph@0.2.0-rc-2024-10-28"];
        assert_eq!(WitVersion::from_names(new.into_iter()), Ok(WitVersion::V0_2_0));
        assert_eq!(
            WitVersion::from_names(["init", "predict"].into_iter()),
            Ok(WitVersion::CURRENT)
        );
    }

    #[test]
    fn an_unknown_version_names_the_supported_ones() {
        let err = WitVersion::from_names(["tensorplug:plugin/types@0.9.0"].into_iter()).unwrap_err();
        assert!(err.contains("tensorplug:plugin@0.9.0"), "{err}");
        assert!(err.contains("0.1.0, 0.2.0"), "{err}");
        let mixed = ["tensorplug:plugin/types@0.1.0", "tensorplug:plugin/log@0.2.0"];
        assert!(WitVersion::from_names(mixed.into_iter())
            .unwrap_err()
            .contains("two versions"));
    }
}

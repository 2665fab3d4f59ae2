//! The compiled components of the stages loaded now, by the SHA-256 of their files' bytes.
//!
//! A component's compiled code and its copy-on-write memory images are immutable and hold
//! nothing of any store, so every stage whose file has the same bytes (the same plugin
//! serving several models, or a version reloaded with an unchanged stage) runs from one
//! copy of them: it costs its instances' memory, not its code again (tens of MiB for a
//! Python or JavaScript component). An entry lives as long as a stage holds its component;
//! the register keeps only weak references, so unloading the last such stage frees it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use sha2::{Digest as _, Sha256};

use super::memory::CompiledCode;

/// What a component is known by: the SHA-256 of the file it was compiled from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Digest([u8; 32]);

impl Digest {
    pub fn of(bytes: &[u8]) -> Self {
        Self(Sha256::digest(bytes).into())
    }

    /// The digest written as [`Self::hex`] writes it.
    pub fn from_hex(hex: &str) -> Option<Self> {
        if hex.len() != 64 || !hex.is_ascii() {
            return None;
        }
        let mut bytes = [0u8; 32];
        for (byte, pair) in bytes.iter_mut().zip(hex.as_bytes().chunks(2)) {
            *byte = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
        }
        Some(Self(bytes))
    }

    /// In lowercase hexadecimal, as file names carry it.
    pub fn hex(&self) -> String {
        self.0.iter().map(|byte| format!("{byte:02x}")).collect()
    }
}

/// The components loaded stages hold, shared by the runtime's clones.
#[derive(Default)]
pub struct Components {
    held: Mutex<HashMap<Digest, Arc<Slot>>>,
}

/// One digest's component while a stage holds it. Locked while it is compiled, so that
/// stages loading the same bytes at once wait for that one compile instead of each
/// compiling (and holding) their own.
#[derive(Default)]
struct Slot(Mutex<Weak<CompiledCode>>);

impl Components {
    /// The component for these bytes: the one a loaded stage holds (and `None`), else
    /// what `compile` makes of them, with what else it returned (registered for the next
    /// stage with the same bytes). Blocks while another thread compiles the same bytes.
    pub fn get_or_compile<R, E>(
        &self,
        digest: Digest,
        compile: impl FnOnce() -> Result<(CompiledCode, R), E>,
    ) -> Result<(Arc<CompiledCode>, Option<R>), E> {
        let slot = {
            let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
            // Slots nobody holds a component of or waits on (a waiter or the compiling
            // thread holds the slot too) go here, so the map stays as large as what is
            // loaded.
            held.retain(|_, slot| Arc::strong_count(slot) > 1 || slot.holds_one());
            held.entry(digest).or_default().clone()
        };
        let mut component = slot.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(shared) = component.upgrade() {
            return Ok((shared, None));
        }
        let (compiled, made) = compile()?;
        let compiled = Arc::new(compiled);
        *component = Arc::downgrade(&compiled);
        Ok((compiled, Some(made)))
    }

    /// How many distinct components loaded stages hold (one being compiled not yet).
    pub fn len(&self) -> usize {
        let held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        held.values().filter(|slot| slot.holds_one()).count()
    }
}

impl Slot {
    /// Whether a stage holds its component (one being compiled does not count).
    fn holds_one(&self) -> bool {
        self.0.try_lock().is_ok_and(|component| component.strong_count() > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtime::component::Component;

    /// An empty component: the header alone.
    fn component(engine: &wasmtime::Engine) -> CompiledCode {
        CompiledCode::in_memory(Component::new(engine, b"\0asm\x0d\0\x01\0").unwrap())
    }

    fn compile(engine: &wasmtime::Engine) -> impl FnOnce() -> Result<(CompiledCode, ()), ()> + '_ {
        || Ok((component(engine), ()))
    }

    #[test]
    fn a_component_is_shared_while_held_and_gone_once_dropped() {
        let engine = wasmtime::Engine::default();
        let components = Components::default();
        let digest = Digest::of(b"one");
        let (first, compiled) = components.get_or_compile(digest, compile(&engine)).unwrap();
        assert!(compiled.is_some());
        let (again, compiled) = components
            .get_or_compile(digest, || -> Result<(CompiledCode, ()), ()> {
                panic!("compiled twice")
            })
            .unwrap();
        assert!(compiled.is_none() && Arc::ptr_eq(&first, &again));
        assert_eq!(components.len(), 1);
        drop((first, again));
        assert_eq!(components.len(), 0);
        let (_, compiled) = components.get_or_compile(digest, compile(&engine)).unwrap();
        assert!(compiled.is_some(), "compiled anew once nobody held it");
    }

    #[test]
    fn other_bytes_are_another_component_and_dead_entries_go() {
        let engine = wasmtime::Engine::default();
        let components = Components::default();
        let (one, _) = components.get_or_compile(Digest::of(b"one"), compile(&engine)).unwrap();
        let (two, _) = components.get_or_compile(Digest::of(b"two"), compile(&engine)).unwrap();
        assert!(!Arc::ptr_eq(&one, &two));
        assert_eq!(components.len(), 2);
        drop(one);
        let (_three, _) = components
            .get_or_compile(Digest::of(b"three"), compile(&engine))
            .unwrap();
        assert_eq!(components.held.lock().unwrap().len(), 2);
    }

    #[test]
    fn a_failed_compile_leaves_the_next_stage_to_try() {
        let engine = wasmtime::Engine::default();
        let components = Components::default();
        let digest = Digest::of(b"bad");
        assert!(components
            .get_or_compile(digest, || Err::<(CompiledCode, ()), _>("broken"))
            .is_err());
        let (_, compiled) = components.get_or_compile(digest, compile(&engine)).unwrap();
        assert!(compiled.is_some());
    }

    #[test]
    fn stages_loading_the_same_bytes_at_once_wait_for_one_compile() {
        let engine = wasmtime::Engine::default();
        let components = Components::default();
        let compiles = std::sync::atomic::AtomicUsize::new(0);
        let digest = Digest::of(b"same");
        let results: Vec<_> = std::thread::scope(|scope| {
            let loads: Vec<_> = (0..4)
                .map(|_| {
                    scope.spawn(|| {
                        components
                            .get_or_compile(digest, || {
                                compiles.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                                std::thread::sleep(std::time::Duration::from_millis(50));
                                Ok::<_, ()>((component(&engine), ()))
                            })
                            .unwrap()
                    })
                })
                .collect();
            loads.into_iter().map(|load| load.join().unwrap()).collect()
        });
        assert_eq!(compiles.into_inner(), 1);
        assert_eq!(results.iter().filter(|(_, compiled)| compiled.is_none()).count(), 3);
        assert!(results.iter().all(|(c, _)| Arc::ptr_eq(c, &results[0].0)));
    }
}

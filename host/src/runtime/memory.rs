//! What a model version holds in memory, measured rather than estimated: its instances'
//! linear memories and tables (kept current by each store's resource limiter as the
//! plugin grows, and given back when the store goes), its share of the compiled code
//! of its stages (a component several loaded stages hold is split between them), and its
//! `wasi:nn` graphs. The serving layer holds the sum of its resident models under the
//! memory budget with this.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use wasmtime::component::Component;

/// What a table element costs the host (a function reference: a pointer).
pub const TABLE_ELEMENT_BYTES: usize = std::mem::size_of::<usize>();

/// The bytes a model version's instances hold in linear memories and tables, summed over
/// every live store. Each store adds what it grows and takes back what it held when it
/// is dropped, so a read is always current and costs one atomic load.
#[derive(Debug, Default)]
pub struct InstanceMemory {
    bytes: AtomicUsize,
}

impl InstanceMemory {
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    pub(super) fn grew(&self, by: usize) {
        self.bytes.fetch_add(by, Ordering::Relaxed);
    }

    pub(super) fn shrank(&self, by: usize) {
        // Never below zero: a store only gives back what it added.
        let _ = self
            .bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| Some(now.saturating_sub(by)));
    }
}

/// One store's part of its model's [`InstanceMemory`]: what it added so far, given back
/// when it is dropped.
#[derive(Debug)]
pub struct StoreMemory {
    model: Arc<super::ModelShared>,
    held: usize,
}

impl StoreMemory {
    pub fn new(model: Arc<super::ModelShared>) -> Self {
        Self { model, held: 0 }
    }

    /// The store now holds `from` bytes fewer and `to` bytes more (a memory or table grew).
    pub fn resized(&mut self, from: usize, to: usize) {
        if to >= from {
            self.model.memory.grew(to - from);
            self.held += to - from;
        } else {
            self.model.memory.shrank(from - to);
            self.held = self.held.saturating_sub(from - to);
        }
    }
}

impl Drop for StoreMemory {
    fn drop(&mut self) {
        self.model.memory.shrank(self.held);
    }
}

/// The compiled components a model version's stages run from, to charge it its share of
/// their code: a component held by `n` loaded stages costs each `1/n` of its image.
#[derive(Debug, Default)]
pub struct CodeShare {
    components: Mutex<Vec<(usize, Weak<Component>)>>,
}

impl CodeShare {
    /// Charges the model for `component` (one of its stages runs from it).
    pub fn add(&self, component: &Arc<Component>) {
        let range = component.image_range();
        let image = (range.end as usize).saturating_sub(range.start as usize);
        self.components
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((image, Arc::downgrade(component)));
    }

    /// The model's share of its components' compiled images, in bytes.
    pub fn bytes(&self) -> usize {
        let components = self.components.lock().unwrap_or_else(PoisonError::into_inner);
        components
            .iter()
            .map(|(image, component)| image / component.strong_count().max(1))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_gives_back_what_it_held_when_dropped() {
        let shared = Arc::new(super::super::ModelShared::default());
        let mut one = StoreMemory::new(shared.clone());
        let mut two = StoreMemory::new(shared.clone());
        one.resized(0, 1 << 20);
        two.resized(0, 3 << 20);
        one.resized(1 << 20, 2 << 20);
        assert_eq!(shared.memory.bytes(), 5 << 20);
        drop(one);
        assert_eq!(shared.memory.bytes(), 3 << 20);
        two.resized(3 << 20, 1 << 20);
        assert_eq!(shared.memory.bytes(), 1 << 20);
        drop(two);
        assert_eq!(shared.memory.bytes(), 0);
    }

    #[test]
    fn a_component_held_by_two_stages_is_charged_half_to_each() {
        let engine = wasmtime::Engine::default();
        let component = Arc::new(Component::new(&engine, b"\0asm\x0d\0\x01\0").unwrap());
        let (one, two) = (CodeShare::default(), CodeShare::default());
        one.add(&component);
        let whole = one.bytes();
        let second_holder = component.clone();
        two.add(&second_holder);
        assert_eq!(one.bytes(), whole / 2);
        drop(second_holder);
        assert_eq!(one.bytes(), whole, "the last holder pays it all");
    }
}

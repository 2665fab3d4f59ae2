//! What a model version holds in memory, measured rather than estimated: its instances'
//! linear memories and tables (kept current by each store's resource limiter as the
//! plugin grows, and given back when the store goes), its share of the compiled code
//! of its stages (a component several loaded stages hold is split between them), and its
//! `wasi:nn` graphs. The serving layer holds the sum of its resident models under the
//! memory budget with this.

use std::ops::Deref;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use object::read::elf::ElfFile64;
use object::{Endianness, Object, ObjectSection};
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

/// The ELF section of a compiled image that holds its modules' data segments (wasmtime's
/// `ELF_WASM_DATA`): the copy-on-write source of their linear memories.
const DATA_IMAGES_SECTION: &str = ".rodata.wasm";

/// A compiled component and the bytes of it a model running from it is charged.
#[derive(Debug)]
pub struct CompiledCode {
    component: Component,
    charged: usize,
}

impl CompiledCode {
    /// Compiled, or read from wasmtime's cache, into the host's own memory: the whole image
    /// is the host's (its data segments too, besides the copy a linear memory starts
    /// from), so all of it is charged.
    pub fn in_memory(component: Component) -> Self {
        let charged = image_bytes(&component);
        Self { component, charged }
    }

    /// Mapped from a file of compiled code: its data segments are then the very pages the
    /// instances' linear memories map copy-on-write, which those memories are charged for
    /// as sized, so the image is charged without them (a Python component: 36 MB mapped,
    /// of which 13 MB are its interpreter's initial heap) — but only as far as its
    /// memories' initial sizes reach: data past them (passive segments a plugin could
    /// carry to hide bytes from the budget) stays charged.
    pub fn mapped(component: Component) -> Self {
        let image = image_bytes(&component);
        let covered = data_images_bytes(&component)
            .unwrap_or(0)
            .min(initial_memories_bound(&component));
        Self {
            component,
            charged: image.saturating_sub(covered),
        }
    }

    /// What a model running from this component alone is charged for its code.
    pub fn charged_bytes(&self) -> usize {
        self.charged
    }
}

impl Deref for CompiledCode {
    type Target = Component;

    fn deref(&self) -> &Component {
        &self.component
    }
}

/// The component's compiled image: the object wasmtime made (or mapped) of it.
fn image(component: &Component) -> &[u8] {
    let range = component.image_range();
    let length = (range.end as usize).saturating_sub(range.start as usize);
    // SAFETY: the image is the component's compiled object, mapped readable for as long
    // as the component lives, which outlives the borrow returned; it is never written
    // after it was made.
    unsafe { std::slice::from_raw_parts(range.start, length) }
}

fn image_bytes(component: &Component) -> usize {
    image(component).len()
}

/// At least what the component's memories take at their start, in bytes: its number of
/// memories times the largest initial size among them; 0 when that cannot be known (a
/// component that imports its modules).
fn initial_memories_bound(component: &Component) -> usize {
    const WASM_PAGE: u64 = 64 << 10;
    component
        .resources_required()
        .and_then(|resources| {
            let pages = resources.max_initial_memory_size?;
            u64::from(resources.num_memories)
                .checked_mul(pages)?
                .checked_mul(WASM_PAGE)
        })
        .map_or(0, |bytes| usize::try_from(bytes).unwrap_or(usize::MAX))
}

/// The size of the image's data segments section, read from its section headers; `None`
/// if the image has none that could be read (it is then charged whole: never less).
fn data_images_bytes(component: &Component) -> Option<usize> {
    let elf = ElfFile64::<Endianness>::parse(image(component)).ok()?;
    let section = elf.section_by_name(DATA_IMAGES_SECTION)?;
    usize::try_from(section.size()).ok()
}

/// The compiled components a model version's stages run from, to charge it its share of
/// their code: a component held by `n` loaded stages costs each `1/n` of its charge.
#[derive(Debug, Default)]
pub struct CodeShare {
    components: Mutex<Vec<(usize, Weak<CompiledCode>)>>,
}

impl CodeShare {
    /// Charges the model for `code` (one of its stages runs from it).
    pub fn add(&self, code: &Arc<CompiledCode>) {
        self.components
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((code.charged, Arc::downgrade(code)));
    }

    /// The model's share of its components' compiled code, in bytes.
    pub fn bytes(&self) -> usize {
        let components = self.components.lock().unwrap_or_else(PoisonError::into_inner);
        components
            .iter()
            .map(|(charged, code)| charged / code.strong_count().max(1))
            .sum()
    }
}

#[cfg(test)]
pub(super) mod tests {
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
        let component = Component::new(&engine, b"\0asm\x0d\0\x01\0").unwrap();
        let component = Arc::new(CompiledCode::in_memory(component));
        let (one, two) = (CodeShare::default(), CodeShare::default());
        one.add(&component);
        let whole = one.bytes();
        let second_holder = component.clone();
        two.add(&second_holder);
        assert_eq!(one.bytes(), whole / 2);
        drop(second_holder);
        assert_eq!(one.bytes(), whole, "the last holder pays it all");
    }

    /// A component whose one core module has a linear memory of `pages` pages and `data`
    /// bytes of data: an active segment initialising it, or a passive one.
    pub(in crate::runtime) fn component_with_data(pages: u64, data: usize, active: bool) -> Vec<u8> {
        use wasm_encoder::{
            ConstExpr, DataSection, InstanceSection, MemorySection, MemoryType, Module, ModuleArg, ModuleSection,
        };
        let mut memories = MemorySection::new();
        memories.memory(MemoryType {
            minimum: pages,
            maximum: None,
            memory64: false,
            shared: false,
            page_size_log2: None,
        });
        let mut segments = DataSection::new();
        if active {
            segments.active(0, &ConstExpr::i32_const(0), vec![0x5a; data]);
        } else {
            segments.passive(vec![0x5a; data]);
        }
        let mut module = Module::new();
        module.section(&memories).section(&segments);
        // Instantiated, as a plugin's modules are: only then does it need the memory.
        let mut instances = InstanceSection::new();
        instances.instantiate(0, Vec::<(&str, ModuleArg)>::new());
        let mut component = wasm_encoder::Component::new();
        component.section(&ModuleSection(&module)).section(&instances);
        component.finish()
    }

    /// `bytes` compiled as `tensorplug compile` does and mapped back as a load does.
    fn mapped(engine: &wasmtime::Engine, bytes: &[u8]) -> CompiledCode {
        let folder = tempfile::tempdir().unwrap();
        let file = folder.path().join("stage.cwasm");
        std::fs::write(&file, engine.precompile_component(bytes).unwrap()).unwrap();
        // SAFETY: written just above by this engine.
        CompiledCode::mapped(unsafe { Component::deserialize_file(engine, &file) }.unwrap())
    }

    #[test]
    fn a_mapped_image_is_charged_without_the_data_its_memories_are_charged_for() {
        let engine = wasmtime::Engine::default();
        let data = 300 * 1024;
        let bytes = component_with_data(8, data, true);
        let in_memory = CompiledCode::in_memory(Component::new(&engine, &bytes).unwrap());
        let mapped = mapped(&engine, &bytes);

        assert_eq!(in_memory.charged_bytes(), image_bytes(&in_memory));
        let data_images = data_images_bytes(&mapped).expect("wasmtime keeps data segments in their own section");
        assert!(
            data_images >= data,
            "{data_images} bytes of data images for {data} of data"
        );
        assert_eq!(mapped.charged_bytes(), image_bytes(&mapped) - data_images);
        assert!(
            mapped.charged_bytes() <= image_bytes(&mapped) - data,
            "the data is charged once, to the memories: {} of {}",
            mapped.charged_bytes(),
            image_bytes(&mapped)
        );
    }

    #[test]
    fn data_a_plugin_carries_past_its_memories_stays_charged() {
        // A one-page memory and 4 MiB of passive data: nothing charges those bytes to the
        // memories, so the code charge must keep them.
        let engine = wasmtime::Engine::default();
        let data = 4 << 20;
        let mapped = mapped(&engine, &component_with_data(1, data, false));
        let page = 64 << 10;
        assert!(
            mapped.charged_bytes() >= data - page,
            "{} bytes charged for {data} bytes of passive data",
            mapped.charged_bytes()
        );
    }
}

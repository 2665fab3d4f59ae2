//! What a plugin file declares an instance of it will hold from its first moment: the
//! initial sizes of the linear memories and tables its core modules define. Read from the
//! file without compiling it, so that a model never loaded yet reserves room under the
//! memory budget for at least what its instances will be measured at once instantiated
//! (its file's size alone is a fraction of that).

use std::io::{Read, Seek};
use std::path::Path;

use wasmparser::{BinaryReader, MemorySectionReader, Parser, Payload, TableSectionReader};

use super::memory::TABLE_ELEMENT_BYTES;

/// The bytes one instance of the plugin in `wasm` (a core module or a component, with
/// every module it nests) holds in linear memories and tables at instantiation; `None`
/// if the file does not parse (its load will say why).
pub fn declared_instance_bytes(wasm: &[u8]) -> Option<u64> {
    let mut bytes = 0u64;
    for payload in Parser::new(0).parse_all(wasm) {
        let declared = match payload.ok()? {
            Payload::MemorySection(memories) => memories_bytes(memories)?,
            Payload::TableSection(tables) => tables_bytes(tables)?,
            _ => 0,
        };
        bytes = bytes.saturating_add(declared);
    }
    Some(bytes)
}

/// What a memory section's memories hold at instantiation.
fn memories_bytes(memories: MemorySectionReader<'_>) -> Option<u64> {
    memories.into_iter().try_fold(0u64, |bytes, memory| {
        let memory = memory.ok()?;
        let page = 1u64 << memory.page_size_log2.unwrap_or(16);
        Some(bytes.saturating_add(memory.initial.saturating_mul(page)))
    })
}

/// What a table section's tables hold at instantiation.
fn tables_bytes(tables: TableSectionReader<'_>) -> Option<u64> {
    tables.into_iter().try_fold(0u64, |bytes, table| {
        let initial = table.ok()?.ty.initial;
        Some(bytes.saturating_add(initial.saturating_mul(TABLE_ELEMENT_BYTES as u64)))
    })
}

/// [`declared_instance_bytes`] of the plugin in `file`, reading only its section headers
/// and the memory and table sections of the modules it nests, not the file whole: sizing
/// a Python component (19 MB, of which these sections are a few bytes) for its first load
/// read and copied all of it, a fifth of the CPU of that model's first answer.
pub fn declared_instance_bytes_of_file(file: &Path) -> Option<u64> {
    let file = std::fs::File::open(file).ok()?;
    let end = file.metadata().ok()?.len();
    let mut sections = Sections {
        reader: std::io::BufReader::with_capacity(4096, file),
        at: 0,
    };
    sections.declared(end, 0)
}

/// How deep components may nest before sizing gives up (a hostile file nesting millions
/// deep would otherwise exhaust the stack).
const MOST_NESTED: usize = 64;

/// A wasm file read section by section.
struct Sections<R> {
    reader: std::io::BufReader<R>,
    /// The reader's offset in the file.
    at: u64,
}

impl<R: Read + Seek> Sections<R> {
    /// The bytes the module or component from here to `end` declares.
    fn declared(&mut self, end: u64, depth: usize) -> Option<u64> {
        if depth > MOST_NESTED {
            return None;
        }
        let mut header = [0u8; 8];
        self.read_into(&mut header)?;
        let component = match header {
            [0, b'a', b's', b'm', 1, 0, 0, 0] => false,
            [0, b'a', b's', b'm', _, _, 1, 0] => true,
            _ => return None,
        };
        let mut bytes = 0u64;
        while self.at < end {
            let id = self.byte()?;
            let size = u64::from(self.leb_u32()?);
            let next = self.at.checked_add(size).filter(|next| *next <= end)?;
            match (component, id) {
                // A core module, or a component, nested in a component.
                (true, CORE_MODULE_SECTION | COMPONENT_SECTION) => {
                    bytes = bytes.saturating_add(self.declared(next, depth + 1)?);
                }
                (false, TABLE_SECTION | MEMORY_SECTION) => {
                    let mut section = vec![0; usize::try_from(size).ok()?];
                    self.read_into(&mut section)?;
                    let reader = BinaryReader::new(&section, 0);
                    let declared = if id == MEMORY_SECTION {
                        memories_bytes(MemorySectionReader::new(reader).ok()?)
                    } else {
                        tables_bytes(TableSectionReader::new(reader).ok()?)
                    };
                    bytes = bytes.saturating_add(declared?);
                }
                _ => {}
            }
            self.skip_to(next)?;
        }
        (self.at == end).then_some(bytes)
    }

    fn read_into(&mut self, bytes: &mut [u8]) -> Option<()> {
        self.reader.read_exact(bytes).ok()?;
        self.at += bytes.len() as u64;
        Some(())
    }

    fn byte(&mut self) -> Option<u8> {
        let mut byte = [0u8];
        self.read_into(&mut byte)?;
        Some(byte[0])
    }

    fn skip_to(&mut self, offset: u64) -> Option<()> {
        let forward = i64::try_from(offset.checked_sub(self.at)?).ok()?;
        self.reader.seek_relative(forward).ok()?;
        self.at = offset;
        Some(())
    }

    /// An unsigned LEB128 of at most 32 bits.
    fn leb_u32(&mut self) -> Option<u32> {
        let mut value = 0u32;
        for shift in (0..35).step_by(7) {
            let byte = self.byte()?;
            value |= u32::from(byte & 0x7f).checked_shl(shift)?;
            if byte & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }
}

const TABLE_SECTION: u8 = 4;
const MEMORY_SECTION: u8 = 5;
const CORE_MODULE_SECTION: u8 = 1;
const COMPONENT_SECTION: u8 = 4;

#[cfg(test)]
mod tests {
    use super::*;

    fn leb_u32(mut value: u32, into: &mut Vec<u8>) {
        loop {
            let byte = (value & 0x7f) as u8;
            value >>= 7;
            if value == 0 {
                into.push(byte);
                return;
            }
            into.push(byte | 0x80);
        }
    }

    #[test]
    fn a_module_declares_its_memories_and_tables_initial_sizes() {
        // (memory 17) (memory 2) (table 100 funcref)
        let wasm = wasm_encoder_free_module(&[17, 2], 100);
        assert_eq!(
            declared_instance_bytes(&wasm),
            Some(19 * 65536 + 100 * TABLE_ELEMENT_BYTES as u64)
        );
    }

    #[test]
    fn a_file_that_does_not_parse_declares_nothing() {
        assert_eq!(declared_instance_bytes(b"\0asm\x01\0\0\0\x05\x7f"), None);
        assert_eq!(declared_instance_bytes(b"not wasm"), None);
    }

    /// `modules` nested in a component (with a custom section between them), and inside
    /// another component `depth` times.
    fn component_of(modules: &[Vec<u8>], depth: usize) -> Vec<u8> {
        let mut body = Vec::new();
        for module in modules {
            body.push(CORE_MODULE_SECTION);
            leb_u32(module.len() as u32, &mut body);
            body.extend_from_slice(module);
            body.extend_from_slice(&[0, 4, 1, b'x', 7, 7]);
        }
        let mut component = b"\0asm\x0d\0\x01\0".to_vec();
        component.extend_from_slice(&body);
        for _ in 0..depth {
            let mut outer = b"\0asm\x0d\0\x01\0".to_vec();
            outer.push(COMPONENT_SECTION);
            leb_u32(component.len() as u32, &mut outer);
            outer.extend_from_slice(&component);
            component = outer;
        }
        component
    }

    fn declared_of_file(wasm: &[u8]) -> Option<u64> {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), wasm).unwrap();
        declared_instance_bytes_of_file(file.path())
    }

    #[test]
    fn a_file_is_sized_by_its_sections_as_the_whole_would_be() {
        let mut code = wasm_encoder_free_module(&[3], 10);
        // A large section it skips: a custom one of 300 bytes.
        code.extend_from_slice(&[0, 0xae, 0x02, 1, b'y']);
        code.extend(std::iter::repeat_n(9, 300));
        let component = component_of(&[wasm_encoder_free_module(&[17, 2], 100), code.clone()], 2);
        let whole = declared_instance_bytes(&component).expect("parses");
        assert_eq!(whole, (19 + 3) * 65536 + 110 * TABLE_ELEMENT_BYTES as u64);
        assert_eq!(declared_of_file(&component), Some(whole));
        assert_eq!(declared_of_file(&code), declared_instance_bytes(&code));
    }

    #[test]
    fn a_hostile_file_is_not_sized_and_costs_no_stack() {
        let module = wasm_encoder_free_module(&[1], 1);
        // Nested past the most: given up, not a stack overflow.
        assert_eq!(
            declared_of_file(&component_of(std::slice::from_ref(&module), 200)),
            None
        );
        // Truncated, or a section running past the end.
        let component = component_of(std::slice::from_ref(&module), 1);
        assert_eq!(declared_of_file(&component[..component.len() - 3]), None);
        let mut overlong = module.clone();
        overlong.extend_from_slice(&[0, 0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert_eq!(declared_of_file(&overlong), None);
        assert_eq!(declared_of_file(b"not wasm"), None);
        assert_eq!(declared_of_file(b""), None);
    }

    /// A core module with memories of `pages` and one funcref table of `table` elements,
    /// encoded by hand (the sections' bytes are what this module reads).
    fn wasm_encoder_free_module(pages: &[u8], table: u8) -> Vec<u8> {
        let mut wasm = b"\0asm\x01\0\0\0".to_vec();
        // Table section: one funcref table, minimum only.
        wasm.extend_from_slice(&[0x04, 0x04, 0x01, 0x70, 0x00, table]);
        // Memory section: each memory minimum only.
        let mut memories = vec![pages.len() as u8];
        for &p in pages {
            memories.extend_from_slice(&[0x00, p]);
        }
        wasm.push(0x05);
        wasm.push(memories.len() as u8);
        wasm.extend_from_slice(&memories);
        wasm
    }
}

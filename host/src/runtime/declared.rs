//! What a plugin file declares an instance of it will hold from its first moment: the
//! initial sizes of the linear memories and tables its core modules define. Read from the
//! file without compiling it, so that a model never loaded yet reserves room under the
//! memory budget for at least what its instances will be measured at once instantiated
//! (its file's size alone is a fraction of that).

use wasmparser::{Parser, Payload};

use super::memory::TABLE_ELEMENT_BYTES;

/// The bytes one instance of the plugin in `wasm` (a core module or a component, with
/// every module it nests) holds in linear memories and tables at instantiation; `None`
/// if the file does not parse (its load will say why).
pub fn declared_instance_bytes(wasm: &[u8]) -> Option<u64> {
    let mut bytes = 0u64;
    for payload in Parser::new(0).parse_all(wasm) {
        match payload.ok()? {
            Payload::MemorySection(memories) => {
                for memory in memories {
                    let memory = memory.ok()?;
                    let page = 1u64 << memory.page_size_log2.unwrap_or(16);
                    bytes = bytes.saturating_add(memory.initial.saturating_mul(page));
                }
            }
            Payload::TableSection(tables) => {
                for table in tables {
                    let initial = table.ok()?.ty.initial;
                    bytes = bytes.saturating_add(initial.saturating_mul(TABLE_ELEMENT_BYTES as u64));
                }
            }
            _ => {}
        }
    }
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

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

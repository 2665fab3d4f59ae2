//! What a plugin may open through WASI: regular files and directories of its model folder,
//! never a FIFO, a device or a socket.
//!
//! WASI file operations run inline on the instance's thread (`allow_blocking_current_thread`,
//! see [`super::store`]), so a plugin that opened a FIFO in its folder would hold that thread
//! inside `open(2)`, where no epoch and no timer reaches it, until something wrote to the
//! FIFO: its instance and its request would be held past every deadline. A device would
//! be read for as long as the plugin likes. So `[method]descriptor.open-at` is shadowed in
//! the linker: it first asks wasmtime-wasi's own `stat-at` (which never opens the file) with
//! the same path flags — so a symlink is judged by what the open would reach — and refuses
//! anything but a regular file or a directory with `access`; everything else goes to
//! wasmtime-wasi's `open-at` unchanged. A symlink opened without following is left to
//! `open-at`, which refuses to open it.
//!
//! Refusals are counted in `tensorplug_special_files_refused_total{opener="plugin"}`.
//! (A file swapped for a FIFO between the check and the open, by someone who can write the
//! model folder, is not caught; plugins themselves cannot write it.)

use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::filesystem::WasiFilesystemView;
use wasmtime_wasi::p2::bindings::filesystem::types::{
    Descriptor, DescriptorFlags, DescriptorType, ErrorCode, Host, HostDescriptor, OpenFlags, PathFlags,
};

use super::store::StoreState;

/// The instance wasmtime-wasi 48 links `wasi:filesystem/types` under (guests importing any
/// 0.2.x version are matched to it by semver). If an upgrade changes it, the shadowing
/// below would define a second instance: the e2e test `a_plugin_cannot_open_a_fifo` fails.
const FILESYSTEM_TYPES: &str = "wasi:filesystem/types@0.2.12";

/// The guest's arguments to `open-at`.
type OpenAt = (Resource<Descriptor>, PathFlags, String, OpenFlags, DescriptorFlags);

/// Its answer: the opened descriptor, or the error code.
type Opened = (Result<Resource<Descriptor>, ErrorCode>,);

/// Replaces `open-at` in `linker` (which already holds WASI) by the checked one.
pub(super) fn refuse_special_files(linker: &mut Linker<StoreState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let shadowed = linker
        .instance(FILESYSTEM_TYPES)
        .and_then(|mut types| types.func_wrap_async("[method]descriptor.open-at", open_at));
    linker.allow_shadowing(false);
    shadowed
}

fn open_at(
    mut store: wasmtime::StoreContextMut<'_, StoreState>,
    (dir, path_flags, path, open_flags, flags): OpenAt,
) -> Box<dyn std::future::Future<Output = wasmtime::Result<Opened>> + Send + '_> {
    Box::new(async move {
        let mut files = store.data_mut().filesystem();
        let target = Resource::new_borrow(dir.rep());
        // An error here (no such file, ...) is left for open-at to report as it would.
        if let Ok(stat) = HostDescriptor::stat_at(&mut files, target, path_flags, path.clone()).await {
            if refused(stat.type_) {
                crate::model::files::count_refused_to_plugin();
                tracing::debug!(
                    "a plugin was refused {path:?}: a {:?}, not a regular file (regular-files-only)",
                    stat.type_
                );
                return Ok((Err(ErrorCode::Access),));
            }
        }
        match HostDescriptor::open_at(&mut files, dir, path_flags, path, open_flags, flags).await {
            Ok(opened) => Ok((Ok(opened),)),
            Err(error) => Ok((Err(Host::convert_error_code(&mut files, error)?),)),
        }
    })
}

/// Whether a file of this type may not be opened.
fn refused(kind: DescriptorType) -> bool {
    !matches!(
        kind,
        DescriptorType::RegularFile | DescriptorType::Directory | DescriptorType::SymbolicLink
    )
}

//! Builds a compiled component's copy-on-write memory images when it is compiled.
//!
//! wasmtime starts each linear memory from an image of the module's data segments. For a
//! component compiled in memory the image is a sealed memfd, made the first time the
//! component is instantiated unless asked for earlier. Making it on the compile thread
//! keeps that work (13 MB for a Python component) out of the first instantiation, which
//! runs under the init deadline, and lets a transient refusal be tried again here.
//!
//! Linux refuses to seal a memfd whose pages something else holds for a moment (reclaim
//! scanning them when memory is short): `fcntl(F_ADD_SEALS)` waits about 70 ms, then
//! fails with `EBUSY`. A load that met this in CI failed with "Device or resource busy".
//! Sealing fresh 13 MB memfds in a 60 MiB memory cgroup met it about once in 800 seals,
//! and the next attempt sealed every time; so a busy image is tried again a few times
//! before the load is failed.

use std::time::Duration;

use wasmtime::component::Component;

/// How many times an image is tried while the kernel reports it busy.
const ATTEMPTS: u32 = 5;
/// The pause after the first busy attempt; it doubles after each.
const FIRST_PAUSE: Duration = Duration::from_millis(10);

/// Makes `component`'s memory images now (for a component mapped from a file they are
/// that file, and this costs nothing).
pub fn prepare(component: &Component) -> Result<(), String> {
    retry_while_busy(ATTEMPTS, FIRST_PAUSE, || component.initialize_copy_on_write_image())
        .map_err(|e| format!("cannot make its memory image: {e:#}"))
}

/// Runs `attempt` until it succeeds, fails other than busy, or has been tried `attempts`
/// times, pausing between tries.
fn retry_while_busy(
    attempts: u32,
    first_pause: Duration,
    mut attempt: impl FnMut() -> wasmtime::Result<()>,
) -> wasmtime::Result<()> {
    let mut pause = first_pause;
    let mut tried = 1;
    loop {
        match attempt() {
            Err(error) if tried < attempts && is_busy(&error) => {
                tracing::debug!(tried, "memory image busy, trying again: {error:#}");
                std::thread::sleep(pause);
                pause *= 2;
                tried += 1;
            }
            outcome => return outcome,
        }
    }
}

/// Whether the kernel said `EBUSY` in `error`'s chain.
fn is_busy(error: &wasmtime::Error) -> bool {
    super::os_error(error).is_some_and(|os| os.kind() == std::io::ErrorKind::ResourceBusy)
}

#[cfg(test)]
mod tests {
    use std::io::{Error as IoError, ErrorKind};

    use super::*;

    /// The error wasmtime returned when sealing the image failed, as the load logged it.
    fn sealing_refused() -> wasmtime::Error {
        wasmtime::Error::from(IoError::from_raw_os_error(libc::EBUSY)).context("adding seals")
    }

    fn attempts_until(succeeds_on: u32, error: fn() -> wasmtime::Error) -> (wasmtime::Result<()>, u32) {
        let mut tried = 0;
        let outcome = retry_while_busy(ATTEMPTS, Duration::ZERO, || {
            tried += 1;
            if tried >= succeeds_on {
                Ok(())
            } else {
                Err(error())
            }
        });
        (outcome, tried)
    }

    #[test]
    fn a_busy_image_is_tried_again_until_it_is_made() {
        let (outcome, tried) = attempts_until(3, sealing_refused);
        assert!(outcome.is_ok());
        assert_eq!(tried, 3);
    }

    #[test]
    fn an_image_busy_every_time_fails_after_the_last_attempt() {
        let (outcome, tried) = attempts_until(u32::MAX, sealing_refused);
        assert_eq!(tried, ATTEMPTS);
        let message = format!("{:#}", outcome.unwrap_err());
        assert!(message.contains("Device or resource busy"), "{message}");
    }

    #[test]
    fn other_failures_are_not_tried_again() {
        let out_of_memory = || wasmtime::Error::from(IoError::from(ErrorKind::OutOfMemory));
        let (outcome, tried) = attempts_until(u32::MAX, out_of_memory);
        assert!(outcome.is_err());
        assert_eq!(tried, 1);
    }

    #[test]
    fn the_pauses_double_and_stay_bounded() {
        let started = std::time::Instant::now();
        let _ = retry_while_busy(4, Duration::from_millis(5), || Err(sealing_refused()));
        // 5 + 10 + 20 ms between four attempts.
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(35), "{waited:?}");
        assert!(waited < Duration::from_secs(2), "{waited:?}");
    }

    #[test]
    fn a_component_s_images_are_made_before_its_first_instance() {
        let engine = wasmtime::Engine::default();
        let bytes = crate::runtime::memory::tests::component_with_data(2, 64 << 10, true);
        let component = Component::new(&engine, bytes).unwrap();
        prepare(&component).unwrap();
    }
}

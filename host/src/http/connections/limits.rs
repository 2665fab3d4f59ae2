//! How many connections may be open, and the descriptors kept free of them.

use std::io;
use std::time::Duration;

/// Descriptors kept free of client connections: model loads and reloads (model files,
/// wasmtime's memory images), plugins' files, the repository watcher, logs, the listener.
pub const DESCRIPTOR_RESERVE: u64 = 128;

/// The bounds every connection is held to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    pub header_read_timeout: Duration,
    pub body_read_timeout: Duration,
    pub idle_timeout: Duration,
    /// Connections served at once, after the descriptor reserve's clamp.
    pub max_connections: usize,
}

impl ConnectionLimits {
    /// The `requested` limits, with the connection cap lowered to what the process's
    /// descriptor limit holds next to [`DESCRIPTOR_RESERVE`]. First raises the soft
    /// descriptor limit to the hard one (process-wide); logs the limits in force.
    pub fn establish(requested: ConnectionLimits) -> Self {
        let descriptors = raise_descriptor_limit();
        let limits = Self {
            max_connections: connection_cap(requested.max_connections, descriptors),
            ..requested
        };
        let requested = requested.max_connections;
        let descriptor_limit = descriptors.map_or_else(|| "unlimited".to_string(), |n| n.to_string());
        if limits.max_connections < requested {
            tracing::warn!(
                max_connections = limits.max_connections,
                requested,
                %descriptor_limit,
                reserve = DESCRIPTOR_RESERVE,
                "the descriptor limit cannot hold --max-connections plus the reserve: serving fewer connections at once"
            );
        }
        tracing::info!(
            max_connections = limits.max_connections,
            %descriptor_limit,
            header_read_timeout_ms = limits.header_read_timeout.as_millis() as u64,
            body_read_timeout_ms = limits.body_read_timeout.as_millis() as u64,
            idle_timeout_ms = limits.idle_timeout.as_millis() as u64,
            "connection limits"
        );
        limits
    }
}

/// How many connections may be open at once: `requested`, but never so many that fewer
/// than [`DESCRIPTOR_RESERVE`] of `descriptor_limit` stay free (and never none).
pub fn connection_cap(requested: usize, descriptor_limit: Option<u64>) -> usize {
    let Some(limit) = descriptor_limit else {
        return requested;
    };
    let room = usize::try_from(limit.saturating_sub(DESCRIPTOR_RESERVE)).unwrap_or(usize::MAX);
    requested.min(room).max(1)
}

/// Raises the soft RLIMIT_NOFILE to the hard one; returns the soft limit then in force,
/// or `None` when it is unlimited or unknown.
#[cfg(unix)]
pub(super) fn raise_descriptor_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes only the struct it is given, which outlives the call.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        tracing::warn!("reading the descriptor limit: {}", io::Error::last_os_error());
        return None;
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit reads only the struct it is given, which outlives the call.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            limit.rlim_cur = raised.rlim_cur;
        } else {
            // E.g. macOS refuses an unlimited hard limit; the soft one stays in force.
            tracing::debug!("raising the descriptor limit: {}", io::Error::last_os_error());
        }
    }
    // rlim_t is u64 on Linux but not on every unix.
    #[allow(clippy::useless_conversion)]
    let soft = u64::try_from(limit.rlim_cur).unwrap_or(u64::MAX);
    (limit.rlim_cur != libc::RLIM_INFINITY).then_some(soft)
}

#[cfg(not(unix))]
pub(super) fn raise_descriptor_limit() -> Option<u64> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_leaves_the_reserve_free() {
        assert_eq!(connection_cap(1024, None), 1024);
        assert_eq!(connection_cap(1024, Some(20_000)), 1024);
        assert_eq!(connection_cap(1024, Some(1024)), 1024 - 128);
        assert_eq!(connection_cap(8, Some(136)), 8);
        assert_eq!(connection_cap(8, Some(135)), 7);
        assert_eq!(connection_cap(8, Some(64)), 1, "never no connection at all");
    }
}

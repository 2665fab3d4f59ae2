//! `GET /metrics`: Prometheus text exposition of every model's counters and of the REST
//! port's connections.

use std::fmt::Write;
use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

use super::connections::ConnectionStats;
use super::AppState;
use crate::serving::StatsSnapshot;

/// One metric family: name, type, help, and how to read it from a model's counters.
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    read: fn(&StatsSnapshot) -> u64,
}

const FAMILIES: [Family; 6] = [
    Family {
        name: "tensorplug_items_succeeded_total",
        kind: "counter",
        help: "Items answered with their outputs.",
        read: |s| s.items_ok,
    },
    Family {
        name: "tensorplug_items_failed_total",
        kind: "counter",
        help: "Items answered with an error (plugin error, trap, contract violation, time limit).",
        read: |s| s.items_failed,
    },
    Family {
        name: "tensorplug_batches_total",
        kind: "counter",
        help: "Batches run through the pipeline.",
        read: |s| s.batches,
    },
    Family {
        name: "tensorplug_items_abandoned_total",
        kind: "counter",
        help: "Items dropped before running because their client had gone.",
        read: |s| s.items_abandoned,
    },
    Family {
        name: "tensorplug_traps_total",
        kind: "counter",
        help: "Plugin calls that trapped; each replaced its instance.",
        read: |s| s.traps,
    },
    Family {
        name: "tensorplug_instances_live",
        kind: "gauge",
        help: "Pipeline instances whose every stage is live.",
        read: |s| s.instances_live,
    },
];

pub async fn metrics(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    let index = state.repository.index();
    let mut text = String::new();
    for family in &FAMILIES {
        let _ = writeln!(
            text,
            "# HELP {} {}\n# TYPE {} {}",
            family.name, family.help, family.name, family.kind
        );
        for (name, entry) in &index {
            if let Some(model) = entry.status.model() {
                let value = (family.read)(&model.stats.snapshot());
                let _ = writeln!(
                    text,
                    "{}{{model=\"{name}\",version=\"{}\"}} {value}",
                    family.name, model.config.version
                );
            }
        }
    }
    let _ = writeln!(
        text,
        "# HELP tensorplug_model_ready Whether a model has a live version (1) or not (0)."
    );
    let _ = writeln!(text, "# TYPE tensorplug_model_ready gauge");
    for (name, entry) in &index {
        let ready = u8::from(entry.status.model().is_some());
        let _ = writeln!(text, "tensorplug_model_ready{{model=\"{name}\"}} {ready}");
    }
    write_connections(&mut text, &state.connections);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text)
}

/// The REST port's connection counters (see `http::connections`).
fn write_connections(text: &mut String, stats: &ConnectionStats) {
    let single = [
        (
            "tensorplug_connections_open",
            "gauge",
            "Client connections being served.",
            stats.open(),
        ),
        (
            "tensorplug_connections_max",
            "gauge",
            "Most client connections served at once (--max-connections, lowered to fit the descriptor limit).",
            stats.max(),
        ),
        (
            "tensorplug_connections_refused_total",
            "counter",
            "Connections answered 503 and closed because the connection cap was reached.",
            stats.refused(),
        ),
    ];
    for (name, kind, help, value) in single {
        let _ = writeln!(text, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}");
    }
    let name = "tensorplug_connections_timed_out_total";
    let _ = writeln!(
        text,
        "# HELP {name} Connections closed, or requests answered 408, for overstaying a timeout \
         (header_read, body_read, idle, or write: a response left unread).\n# TYPE {name} counter"
    );
    for (timeout, value) in stats.timed_out() {
        let _ = writeln!(text, "{name}{{timeout=\"{timeout}\"}} {value}");
    }
}

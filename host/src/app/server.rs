//! Runs the server: loads the repository, serves REST (and gRPC, unless it is off, and the
//! NATS queue edge, if on) until
//! the shutdown future resolves, then drains every in-flight and queued item before
//! returning.
//!
//! The server listens as soon as it starts: live at once, ready when every model it was
//! asked to load has loaded (or failed to). Models load side by side in the background.
//!
//! Shutdown has one deadline, taken when the signal arrives: the watcher stops first (no
//! reload starts while draining), in-flight requests finish (REST and gRPC alike), then
//! every model's queue empties and its instance threads exit and are joined — all before
//! `grace` has passed since the signal. What is still running then is dropped.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::api::repository::{ModelControl, RepositoryAccess, RepositoryApi};
use prometheus_client::registry::Registry;

use crate::app::config::{GrpcPort, Metrics, ServeConfig};
use crate::grpc::incoming::ConnectionBounds;
use crate::grpc::metrics::GrpcMetrics;
use crate::grpc::{self, GrpcState};
use crate::http::connections::{self, ConnectionLimits, ConnectionStats};
use crate::http::metrics::HttpMetrics;
use crate::http::{router, AppState};
use crate::nats::metrics::NatsMetrics;
use crate::nats::NatsEdge;
use crate::runtime::Runtime;
use crate::serving::{self, residency, watch, Repository};

/// Serves `config.repository` on `listener` (REST) and on `config.grpc_port` (gRPC, unless
/// off; port 0 is any free one) until `shutdown` resolves.
pub async fn run(
    config: ServeConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let grpc_listener = match config.grpc_port {
        GrpcPort::Off => None,
        GrpcPort::Port(port) => Some(
            TcpListener::bind((config.host, port))
                .await
                .with_context(|| format!("listening for gRPC on {}:{port}", config.host))?,
        ),
    };
    run_with_grpc(config, listener, grpc_listener, shutdown).await
}

/// Serves `config.repository` on `listener` (REST) and on `grpc_listener` (gRPC, if
/// given; `config.grpc_port` is not read) until `shutdown` resolves.
pub async fn run_with_grpc(
    config: ServeConfig,
    listener: TcpListener,
    grpc_listener: Option<TcpListener>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    // First, so that model loads get the raised descriptor limit too.
    let limits = ConnectionLimits::establish(config.connections.limits());
    let cache_dir = config.cache.usable_dir();
    let runtime = Runtime::new(cache_dir.as_deref()).context("starting the wasm runtime")?;
    crate::runtime::purge_in_background();
    let tracing_on = crate::traces::install(&config.tracing.settings()).context("turning tracing on")?;
    if let Some(on) = &tracing_on {
        tracing::info!(endpoint = on.url(), "exporting traces over OTLP");
    }
    let metrics_on = config.metrics == Metrics::On;
    let mut edges = vec![&crate::http::REST_EDGE, &crate::http::OPENAI_EDGE];
    if grpc_listener.is_some() {
        edges.push(&grpc::status::GRPC_EDGE);
    }
    let nats_settings = config.nats.settings();
    if let Some(settings) = &nats_settings {
        settings.validate().map_err(anyhow::Error::msg)?;
        edges.push(&crate::nats::NATS_EDGE);
    }
    let policy = config.residency_policy().map_err(anyhow::Error::msg)?;
    let repository = Arc::new(
        Repository::new(&config.repository, runtime, metrics_on)
            .served_by(edges)
            .with_residency(policy),
    );
    // The budget, idle models and idle instances, twice a second.
    repository.keep_residency();
    let mut initial_loads = tokio::task::JoinSet::new();
    if policy.on_demand() {
        // Indexed in the background (live, not ready until done); then the pinned models
        // (and explicit mode's --load-model ones) load; the rest wait for a request.
        repository.begin_indexing();
        let (indexing, explicit) = (repository.clone(), config.load_models.clone());
        initial_loads.spawn(async move {
            let pinned = match indexing.index_all().await {
                Ok(pinned) => pinned,
                Err(error) => {
                    tracing::error!("indexing the model repository failed: {error}");
                    return;
                }
            };
            let mut resident = tokio::task::JoinSet::new();
            for name in pinned.into_iter().chain(explicit) {
                let repository = indexing.clone();
                resident.spawn(async move {
                    let _ = repository.load(&name, residency::STARTUP).await;
                });
            }
            resident.join_all().await;
        });
    } else {
        let initial = match config.model_control {
            ModelControl::Poll | ModelControl::None => repository
                .model_folders()
                .with_context(|| format!("reading the model repository {}", config.repository.display()))?,
            ModelControl::Explicit => config.load_models.clone(),
        };
        // The server listens (live, not ready) while the models load, side by side.
        repository.expect(&initial);
        for name in initial {
            let repository = repository.clone();
            // A failure is logged and shown in the index; the other models still serve.
            initial_loads.spawn(async move {
                let _ = repository.load(&name, residency::STARTUP).await;
            });
        }
    }
    let model_watch = match config.model_control {
        ModelControl::Poll => Some(
            watch(
                repository.clone(),
                Duration::from_millis(config.watch_debounce_ms),
                (config.watch_poll_ms > 0).then(|| Duration::from_millis(config.watch_poll_ms)),
            )
            .context("watching the model repository")?,
        ),
        ModelControl::Explicit | ModelControl::None => None,
    };

    if config.repository_api == RepositoryApi::Open && config.admin_token.is_none() {
        tracing::warn!(
            "--repository-api open without --admin-token: anyone who can reach this port can load and unload models"
        );
    }
    let connection_stats = Arc::new(ConnectionStats::default());
    // One cap for both ports: the descriptor reserve holds whatever the mix.
    let connection_slots = Arc::new(Semaphore::new(limits.max_connections.min(Semaphore::MAX_PERMITS)));
    let max_body_bytes = usize::try_from(config.max_body_bytes).unwrap_or(usize::MAX);
    let grpc_max_concurrent_streams = config.grpc_max_concurrent_streams;
    let repository_access = RepositoryAccess {
        api: config.repository_api,
        model_control: config.model_control,
        admin_token: config.admin_token.clone(),
    };
    // One registry for the whole server: each layer adds its own metrics to it.
    let (http_metrics, grpc_metrics, nats_metrics) = match metrics_on {
        true => {
            let mut registry = Registry::default();
            serving::metrics::register(&mut registry, &repository);
            if let Some(on) = &tracing_on {
                registry.register_collector(Box::new(crate::traces::SpanCountsCollector(on.counts.clone())));
            }
            let grpc_metrics = GrpcMetrics::register(&mut registry);
            let nats_metrics = nats_settings.as_ref().map(|_| NatsMetrics::register(&mut registry));
            (
                Some(HttpMetrics::new(registry, connection_stats.clone())),
                Some(grpc_metrics),
                nats_metrics,
            )
        }
        false => (None, None, None),
    };
    let state = Arc::new(AppState {
        repository: repository.clone(),
        max_body_bytes,
        repository_access: repository_access.clone(),
        metrics: http_metrics,
    });
    let address = listener.local_addr()?;
    tracing::info!(%address, repository = %config.repository.display(), "serving the Open Inference Protocol over HTTP");

    let grace = config.shutdown_grace();
    let delay = config.shutdown_delay();
    let (stopping_tx, mut stopping_rx) = tokio::sync::watch::channel(None::<Instant>);
    let draining = repository.clone();
    let signal = async move {
        shutdown.await;
        let deadline = Instant::now() + grace;
        // Readiness turns false at once (REST, gRPC, health), while requests drain.
        draining.begin_drain();
        if !delay.is_zero() {
            // Still accepting: a balancer that has not yet seen readiness turn false
            // keeps sending here, and those requests are served, not refused.
            tracing::info!(
                delay_ms = delay.as_millis() as u64,
                "shutting down: readiness is off; serving on while load balancers notice"
            );
            tokio::time::sleep(delay).await;
        }
        tracing::info!(
            grace_secs = grace.as_secs(),
            "shutting down: finishing in-flight requests"
        );
        let _ = stopping_tx.send(Some(deadline));
    };
    // gRPC beside REST, stopped by the same signal (it stops taking calls and finishes
    // those in flight), and waited for under the same deadline, before the drain.
    let grpc = match grpc_listener {
        None => None,
        Some(grpc_listener) => {
            let grpc_address = grpc_listener.local_addr()?;
            // Not `address=`: that names the REST port in the log, once.
            tracing::info!(grpc = %grpc_address, "serving the Open Inference Protocol over gRPC");
            let stop = stopped(stopping_rx.clone());
            let state = GrpcState {
                repository: repository.clone(),
                max_message_bytes: max_body_bytes,
                repository_access,
                metrics: grpc_metrics,
                connections: ConnectionBounds {
                    slots: connection_slots.clone(),
                    idle_timeout: limits.idle_timeout,
                },
                message_read_timeout: limits.body_read_timeout,
                max_concurrent_streams: grpc_max_concurrent_streams,
            };
            Some(tokio::spawn(async move {
                // Logged when it happens; REST serves on.
                if let Err(error) = grpc::serve(grpc_listener, state, stop).await {
                    tracing::error!("gRPC server failed: {error:#}");
                }
            }))
        }
    };
    // The queue edge beside them: it stops pulling on the same signal, answers what it
    // holds, and is waited for under the same deadline, before the drain.
    let nats = nats_settings.map(|settings| {
        let stop = stopped(stopping_rx.clone());
        let edge = NatsEdge {
            settings,
            repository: repository.clone(),
            max_body_bytes,
            metrics: nats_metrics,
        };
        tokio::spawn(async move {
            if let Err(error) = crate::nats::serve(edge, stop).await {
                tracing::error!("NATS edge failed: {error}");
            }
        })
    });
    // Boxed so it can be dropped (with any request still running) before the drain.
    let mut serving = Box::pin(connections::serve(
        listener,
        router(state),
        limits,
        connection_slots,
        connection_stats,
        signal,
    ));
    let ended_by_itself = tokio::select! {
        () = &mut serving => true,
        _ = stopping_rx.wait_for(Option::is_some) => false,
    };
    drop(model_watch);
    initial_loads.abort_all();
    let deadline = stopping_rx.borrow().unwrap_or_else(|| Instant::now() + grace);
    let mut in_time = ended_by_itself || tokio::time::timeout_at(deadline, &mut serving).await.is_ok();
    // Dropping the server drops whatever request is still running.
    drop(serving);
    for (edge, task) in [("gRPC server", grpc), ("NATS edge", nats)] {
        if let Some(task) = task {
            in_time &= finished_by(deadline, edge, task).await;
        }
    }
    in_time &= repository.drain(deadline).await;
    if let Some(on) = tracing_on {
        // The spans of the drained requests, within what is left of the grace (a
        // collector that does not answer costs at most that).
        let left = deadline.saturating_duration_since(Instant::now());
        let _ = tokio::task::spawn_blocking(move || on.shutdown(left.max(Duration::from_millis(100)))).await;
    }
    if in_time {
        tracing::info!("stopped");
    } else {
        tracing::warn!(
            grace_secs = grace.as_secs(),
            "grace period over; dropped unfinished requests"
        );
    }
    Ok(())
}

/// Resolves once the drain has begun (the watch holds its deadline).
async fn stopped(mut stopping: tokio::sync::watch::Receiver<Option<Instant>>) {
    let _ = stopping.wait_for(Option::is_some).await;
}

/// Waits for an edge's task (`edge` names it in the log) until `deadline`, aborting it
/// then; whether it finished in time.
async fn finished_by(deadline: Instant, edge: &str, mut task: tokio::task::JoinHandle<()>) -> bool {
    match tokio::time::timeout_at(deadline, &mut task).await {
        Ok(Ok(())) => true,
        Ok(Err(error)) => {
            tracing::error!("{edge} task failed: {error}");
            true
        }
        Err(_) => {
            task.abort();
            false
        }
    }
}

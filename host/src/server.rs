//! Runs the server: loads the repository, serves REST until the shutdown future
//! resolves, then drains every in-flight and queued item before returning.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;

use crate::config::{ModelControl, ServeConfig};
use crate::http::{router, AppState};
use crate::runtime::Runtime;
use crate::serving::{watch, Repository};

/// Serves `config.repository` on `listener` until `shutdown` resolves.
pub async fn run(
    config: ServeConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let cache_dir = config.cache.resolved_dir();
    let runtime = Runtime::new(cache_dir.as_deref()).context("starting the wasm runtime")?;
    let repository = Arc::new(Repository::new(&config.repository, runtime));
    let initial = match config.model_control {
        ModelControl::Poll | ModelControl::None => repository
            .model_folders()
            .with_context(|| format!("reading the model repository {}", config.repository.display()))?,
        ModelControl::Explicit => config.load_models.clone(),
    };
    for name in &initial {
        // A failure is logged and shown in the index; the other models still serve.
        let _ = repository.load(name).await;
    }
    let _watch = match config.model_control {
        ModelControl::Poll => Some(
            watch(repository.clone(), Duration::from_millis(config.watch_debounce_ms))
                .context("watching the model repository")?,
        ),
        ModelControl::Explicit | ModelControl::None => None,
    };

    let state = Arc::new(AppState {
        repository: repository.clone(),
        max_body_bytes: usize::try_from(config.max_body_bytes).unwrap_or(usize::MAX),
        repository_api: config.repository_api,
        model_control: config.model_control,
        admin_token: config.admin_token.clone(),
    });
    let address = listener.local_addr()?;
    tracing::info!(%address, repository = %config.repository.display(), "serving the Open Inference Protocol over HTTP");

    let (stopping_tx, stopping_rx) = tokio::sync::oneshot::channel::<()>();
    let grace = config.shutdown_grace();
    let signal = async move {
        shutdown.await;
        tracing::info!("shutting down: finishing in-flight requests");
        let _ = stopping_tx.send(());
    };
    let serving = axum::serve(listener, router(state)).with_graceful_shutdown(signal);
    let serving = async move { serving.await.context("serving HTTP") };
    tokio::pin!(serving);
    // Once shutdown starts, in-flight requests get `grace` to finish.
    tokio::select! {
        result = &mut serving => result?,
        _ = async { let _ = stopping_rx.await; tokio::time::sleep(grace).await } => {
            tracing::warn!(grace_secs = grace.as_secs(), "grace period over; dropping unfinished requests");
        }
    }
    repository.drain(grace).await;
    tracing::info!("stopped");
    Ok(())
}

//! The `tensorplug` binary: parses the command line, sets up logging and runs the
//! chosen command. Everything else lives in the library.

use clap::Parser;
use tensorplug::app::config::{Cli, Command};

/// jemalloc, for the reasons in Cargo.toml (the `jemalloc` feature, on by default).
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let result = runtime.block_on(run());
    // The drain has had its grace period: a request still in a plugin call on a runtime
    // thread (the idle path runs them there) must not hold the exit.
    runtime.shutdown_background();
    result
}

async fn run() -> anyhow::Result<()> {
    let cli = Cli::try_parse().unwrap_or_else(|error| {
        // `infer` exits 2 when lines failed, so its usage errors exit 1 (clap's is 2).
        let infer = std::env::args().nth(1).as_deref() == Some("infer");
        let code = if error.use_stderr() && infer {
            1
        } else {
            error.exit_code()
        };
        let _ = error.print();
        std::process::exit(code);
    });
    match cli.command {
        Command::Serve(config) => {
            tensorplug::app::telemetry::init(&config.log, config.log_format);
            config.onnxruntime.apply();
            let address = std::net::SocketAddr::new(config.host, config.http_port);
            let listener = tokio::net::TcpListener::bind(address).await?;
            tensorplug::app::server::run(*config, listener, tensorplug::app::shutdown::signal()).await
        }
        Command::Infer(config) => {
            tensorplug::app::telemetry::init_stderr(config.log_filter());
            config.onnxruntime.apply();
            let tracing = tensorplug::traces::install(&config.tracing.settings())?;
            let code = tensorplug::batch::run(config.options()).await;
            if let Some(tracing) = tracing {
                // The run's last spans, within 5 s (a collector that does not answer costs no more).
                let flushed = move || tracing.shutdown(std::time::Duration::from_secs(5));
                let _ = tokio::task::spawn_blocking(flushed).await;
            }
            std::process::exit(code);
        }
        Command::New(config) => {
            let root = tensorplug::app::new::scaffold(&config.project())?;
            println!("made {}: see its README.md (build, serve, curl)", root.display());
            Ok(())
        }
        Command::Compile(config) => {
            tensorplug::app::telemetry::init("error", Default::default());
            let Some(cache) = config.cache().usable_dir() else {
                anyhow::bail!("no usable compile cache folder: give one with --cache-dir");
            };
            let runtime = tensorplug::runtime::Runtime::new(Some(&cache))?;
            let repository = config.repository.clone();
            let models = tokio::task::spawn_blocking(move || {
                tensorplug::app::compile::compile_repository(&repository, &runtime)
            })
            .await??;
            let (mut broken, mut compiled) = (0, 0);
            for model in &models {
                compiled += model.compiled;
                match &model.result {
                    Ok(stages) => println!("ok     {}: {}", model.name, stages.join(", ")),
                    Err(error) => {
                        broken += 1;
                        println!("error  {}: {error}", model.name);
                    }
                }
            }
            println!(
                "{} models, {compiled} stages compiled into {}, {broken} broken",
                models.len(),
                cache.display()
            );
            if broken > 0 {
                std::process::exit(1);
            }
            Ok(())
        }
        Command::Check(config) => {
            tensorplug::app::telemetry::init("error", Default::default());
            config.onnxruntime.apply();
            let runtime = tensorplug::runtime::Runtime::new(config.cache.usable_dir().as_deref())?;
            let verdicts = tensorplug::app::check::check_repository(&config.repository, &runtime).await?;
            let mut broken = 0;
            for verdict in &verdicts {
                match &verdict.result {
                    Ok(summary) => println!("ok     {}: {summary}", verdict.name),
                    Err(error) => {
                        broken += 1;
                        println!("error  {}: {error}", verdict.name);
                    }
                }
            }
            println!("{} models, {} broken", verdicts.len(), broken);
            if broken > 0 {
                std::process::exit(1);
            }
            Ok(())
        }
    }
}

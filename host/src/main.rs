//! The `tensorplug` binary: parses the command line, sets up logging and runs the
//! chosen command. Everything else lives in the library.

use clap::Parser;
use tensorplug::config::{Cli, Command};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(config) => {
            tensorplug::telemetry::init(&config.log);
            let address = std::net::SocketAddr::new(config.host, config.http_port);
            let listener = tokio::net::TcpListener::bind(address).await?;
            tensorplug::server::run(config, listener, tensorplug::shutdown::signal()).await
        }
    }
}

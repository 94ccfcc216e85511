//! `keymesh-server`: parses the configuration, starts the runtime with `server-threads`
//! workers, and serves until SIGTERM.

use std::process::ExitCode;

use keymesh_engine::config::settings::Settings;
use keymesh_engine::config::{Config, HELP};
use keymesh_engine::server::{self, Server};

/// The version this build reports: the crate's, unless the build set `KEYMESH_BUILD_VERSION`
/// (a release pipeline's tag; the upgrade tests build a second binary that reports another
/// version). Read here, in the binary, so changing it rebuilds only this file.
const BUILD_VERSION: &str = match option_env!("KEYMESH_BUILD_VERSION") {
    Some(v) => v,
    None => env!("CARGO_PKG_VERSION"),
};

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        print!("{HELP}");
        return ExitCode::SUCCESS;
    }
    if args.iter().any(|a| a == "--version" || a == "-v") {
        println!("keymesh-server {BUILD_VERSION} (redis protocol {})", keymesh_engine::cmd::connection::REDIS_COMPAT_VERSION);
        return ExitCode::SUCCESS;
    }
    let config = match Config::from_args(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("keymesh-server: {e}");
            return ExitCode::from(2);
        }
    };
    let settings = Settings::from_config(&config);
    if let Err(e) = init_logging(&settings) {
        eprintln!("keymesh-server: {e}");
        return ExitCode::from(2);
    }
    let threads = match settings.server_threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(threads).enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("keymesh-server: failed to start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        let server = match Server::new(config, BUILD_VERSION) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("keymesh-server: {e}");
                return ExitCode::from(2);
            }
        };
        let listeners = match server::bind(&server).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("keymesh-server: {e}");
                return ExitCode::FAILURE;
            }
        };
        match server::run(server, listeners).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("keymesh-server: {e}");
                ExitCode::FAILURE
            }
        }
    })
}

fn init_logging(settings: &Settings) -> Result<(), String> {
    let level = match settings.loglevel.as_str() {
        "debug" => "debug",
        "verbose" => "info",
        "notice" => "info",
        "warning" => "warn",
        _ => "off",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_target(false);
    match settings.logfile.as_str() {
        "" => builder.with_writer(std::io::stderr).init(),
        path => {
            let file = std::fs::OpenOptions::new().create(true).append(true).open(path).map_err(|e| format!("failed to open logfile {path}: {e}"))?;
            builder.with_ansi(false).with_writer(std::sync::Mutex::new(file)).init();
        }
    }
    Ok(())
}

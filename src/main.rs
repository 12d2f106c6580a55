//! The `idem` binary: parse the command line, load configuration, run.
//! Exit codes: 0 ok, 1 failed to start or run, 64 (EX_USAGE) bad configuration.

use std::process::ExitCode;

use clap::Parser;
use idem::cli::{Cli, Command, KeyAction, KeysArgs, ServeArgs};
use idem::config::Config;
use idem::signal::{Signal, Signals};

const EX_USAGE: u8 = 64;

/// mimalloc instead of glibc's malloc: a proxied request allocates and frees many small
/// buffers across threads, where glibc spent ~12 % of idem's CPU on fresh intents
/// (perf; docs/benchmarks.md). Through `idem_alloc`, which keeps ordinary alignments
/// off mimalloc's aligned path.
#[global_allocator]
static ALLOCATOR: idem_alloc::Allocator = idem_alloc::Allocator;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // `serve` runs its data plane on worker threads of its own (`crate::workers`); the
    // main runtime only carries the admin listener, signals and reloads.
    let runtime = match &cli.command {
        Command::Serve(_) => tokio::runtime::Builder::new_current_thread(),
        _ => tokio::runtime::Builder::new_multi_thread(),
    }
    .enable_all()
    .build();
    let runtime = match runtime {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("idem: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match cli.command {
        Command::Serve(args) => runtime.block_on(serve(args)),
        Command::Check { config } => check(&config),
        Command::Migrate { config } => runtime.block_on(migrate(&config)),
        Command::Keys(args) => runtime.block_on(keys(args)),
        Command::Demo => runtime.block_on(demo()),
        Command::Loadtest(args) => ExitCode::from(runtime.block_on(idem::loadtest::main(args))),
    }
}

fn load(args: &ServeArgs) -> Result<Config, String> {
    let mut config = match (&args.config, &args.upstream) {
        (Some(path), _) => Config::load(path).map_err(|e| e.to_string())?,
        (None, Some(url)) => Config::for_upstream(url).map_err(|e| e.to_string())?,
        (None, None) => return Err("give --config FILE or --upstream URL".to_owned()),
    };
    if let (Some(_), Some(url)) = (&args.config, &args.upstream) {
        config.upstream.url =
            idem::config::parse_upstream_url(url).map_err(|e| format!("--upstream: {e}"))?;
    }
    if let Some(listen) = args.listen {
        config.listen = listen;
    }
    if let Some(listen) = args.admin_listen {
        config.admin.listen = listen;
    }
    if let Some(workers) = &args.workers {
        config.server.workers =
            idem::config::parse_workers(workers).map_err(|e| format!("--workers: {e}"))?;
    }
    Ok(config)
}

async fn serve(args: ServeArgs) -> ExitCode {
    idem::telemetry::init(args.log_format);
    let config = match load(&args) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("idem: {e}");
            return ExitCode::from(EX_USAGE);
        }
    };
    for warning in &config.warnings {
        tracing::warn!("config: {warning}");
    }
    let mut signals = match Signals::new() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("idem: cannot install signal handlers: {e}");
            return ExitCode::FAILURE;
        }
    };
    let running = match idem::app::start(&config).await {
        Ok(running) => running,
        // A key file the configuration names is unusable: the configuration's fault,
        // as `idem check` says.
        Err(e @ idem::app::StartError::Keys(_)) => {
            eprintln!("idem: {e}");
            return ExitCode::from(EX_USAGE);
        }
        Err(e) => {
            eprintln!("idem: {e}");
            return ExitCode::FAILURE;
        }
    };
    loop {
        match signals.next().await {
            Signal::Shutdown => break,
            Signal::Reload => match load(&args).and_then(|new| running.reload(&new)) {
                Ok(generation) => tracing::info!(generation, "configuration reloaded"),
                Err(e) => {
                    tracing::error!("reload refused, keeping the running configuration:\n{e}")
                }
            },
        }
    }
    tracing::info!("shutting down");
    if running.shutdown().await {
        ExitCode::SUCCESS
    } else {
        tracing::warn!("drain did not finish within shutdown_grace");
        ExitCode::SUCCESS
    }
}

/// The configuration, then what each part reads of its own at start: the
/// `store.encryption` key files, read by the sealing layer as `serve` reads them (once).
fn check(path: &std::path::Path) -> ExitCode {
    let config = match Config::load(path) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(EX_USAGE);
        }
    };
    if let Err(e) = idem::store::Sealing::load(config.store.encryption.as_ref()) {
        eprintln!("{e}");
        return ExitCode::from(EX_USAGE);
    }
    print!("{}", config.route_table());
    ExitCode::SUCCESS
}

async fn migrate(path: &std::path::Path) -> ExitCode {
    let config = match Config::load(path) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(EX_USAGE);
        }
    };
    let idem::config::StoreBackend::Postgres(pg) = &config.store.backend else {
        eprintln!(
            "idem: migrate creates the PostgreSQL table; {} has store.backend: {} (nothing to do)",
            path.display(),
            config.store.backend_name()
        );
        return ExitCode::from(EX_USAGE);
    };
    let table = &pg.table;
    match idem::store::postgres::migrate(pg).await {
        Ok(done) => {
            println!("table {table}: {done}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("idem: cannot migrate table {table}: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn keys(args: KeysArgs) -> ExitCode {
    use idem::admin_client::{key_request, resolve_request, unknown_request, unknown_table};
    let answer = match &args.action {
        KeyAction::Get { key, body, target } => {
            key_request(target, http::Method::GET, key, *body).await
        }
        KeyAction::Delete { key, target } => {
            key_request(target, http::Method::DELETE, key, false).await
        }
        KeyAction::Unknown {
            route,
            inflight,
            limit,
            admin,
        } => unknown_request(admin, route, *inflight, *limit)
            .await
            .map(
                |(status, text)| match (status.is_success(), serde_json::from_str(&text)) {
                    (true, Ok(listing)) => (status, unknown_table(&listing)),
                    // A refusal's reason (an unknown route, a bad limit) as a sentence.
                    (false, Ok(serde_json::Value::Object(o))) => match o.get("error") {
                        Some(serde_json::Value::String(e)) => (status, format!("idem: {e}")),
                        _ => (status, text),
                    },
                    _ => (status, text),
                },
            ),
        KeyAction::Resolve(resolve) => resolve_request(resolve).await,
        // Local: talks to no admin API.
        KeyAction::NewEncryptionKey => {
            Ok((http::StatusCode::OK, idem::store::seal::new_key_base64()))
        }
    };
    // What the admin API says comes from the store (keys, scopes, stored bodies, the
    // `error` of a refusal): control characters are shown, not sent to the terminal.
    use idem::terminal::escape_lines;
    match answer {
        Ok((status, text)) => {
            println!("{}", escape_lines(text.trim_end()));
            if status.is_success() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("idem: {}", escape_lines(&e));
            ExitCode::FAILURE
        }
    }
}

async fn demo() -> ExitCode {
    match idem::demo::run(&mut std::io::stdout()).await {
        // The demo doubles as a smoke test (CI runs it verbatim): through idem, every
        // intended charge must execute exactly once.
        Ok(rows) if rows.iter().all(|(_, _, guarded)| guarded.charges == 1) => ExitCode::SUCCESS,
        Ok(_) => {
            eprintln!("idem demo: a charge executed more than once through idem");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("idem demo: {e}");
            ExitCode::FAILURE
        }
    }
}

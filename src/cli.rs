//! Command line (SPEC §7).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::telemetry::LogFormat;

/// idem: a sidecar reverse proxy that makes side-effecting tool calls safe to repeat.
#[derive(Debug, Parser)]
#[command(name = "idem", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the proxy. Flags override the file.
    Serve(ServeArgs),
    /// Validate a configuration file and print the route table.
    Check {
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Create or upgrade the PostgreSQL table (`store.backend: postgres`) and record its
    /// schema version, then exit. Run it with a role that may create the table: `serve`
    /// runs no DDL.
    Migrate {
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Inspect, release or resolve idempotency keys through the admin API.
    Keys(KeysArgs),
    /// Watch idem stop double charges: a guided demo on loopback, no setup needed.
    Demo,
    /// Fire N intents, each repeated D times at once, and check none ran twice.
    Loadtest(crate::loadtest::LoadtestArgs),
}

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// YAML configuration file.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Upstream URL (without --config: run on the built-in defaults).
    #[arg(long)]
    pub upstream: Option<String>,
    /// Proxy listen address.
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// Admin listen address.
    #[arg(long)]
    pub admin_listen: Option<SocketAddr>,
    /// Worker threads serving requests: `auto` (one per usable CPU) or a number.
    #[arg(long)]
    pub workers: Option<String>,
    #[arg(long, value_enum, default_value = "text")]
    pub log_format: LogFormat,
}

#[derive(Debug, clap::Args)]
pub struct KeysArgs {
    #[command(subcommand)]
    pub action: KeyAction,
}

/// Where the admin API is. Only on the subcommands that talk to it (not global), so
/// that `--help` of one that talks to nothing lists none of it.
#[derive(Debug, clap::Args)]
pub struct AdminArgs {
    /// Admin base URL.
    #[arg(long, default_value = "http://127.0.0.1:9901")]
    pub admin: String,
    /// Admin token (or IDEM_ADMIN_TOKEN).
    #[arg(long, env = "IDEM_ADMIN_TOKEN")]
    pub token: Option<String>,
}

/// One key's record: its route and scope, and the admin API to ask.
#[derive(Debug, clap::Args)]
pub struct KeyTarget {
    /// Route name.
    #[arg(long, default_value = "")]
    pub route: String,
    /// Scope the key was namespaced with, if the route has one.
    #[arg(long, default_value = "")]
    pub scope: String,
    #[command(flatten)]
    pub admin: AdminArgs,
}

#[derive(Debug, Subcommand)]
pub enum KeyAction {
    /// Show the record of KEY.
    Get {
        key: String,
        /// Include the stored body.
        #[arg(long)]
        body: bool,
        #[command(flatten)]
        target: KeyTarget,
    },
    /// Release KEY (after an incident).
    Delete {
        key: String,
        #[command(flatten)]
        target: KeyTarget,
    },
    /// List unknown outcomes (sent, result never learned, lease ended), read from the
    /// store: every replica's. `--route` narrows it to one route.
    Unknown {
        /// Only this route's (a name neither configured nor on any record is an error).
        #[arg(long, default_value = "")]
        route: String,
        /// Also list the intents in flight and those waiting for their repeat.
        #[arg(long)]
        inflight: bool,
        /// At most this many of each (1-1000).
        #[arg(long, default_value_t = 100)]
        limit: usize,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Record what became of the unknown outcome of KEY: `--completed --status N` (every
    /// repeat then gets that response) or `--not-executed` (the next repeat is sent once,
    /// with the same upstream key). Refused (exit 1) unless KEY is an unknown outcome.
    Resolve(ResolveArgs),
    /// Print a fresh key for `store.encryption`: 32 random bytes in base64, to put in a
    /// file (a Kubernetes Secret key). Talks to nothing.
    NewEncryptionKey,
}

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("outcome").required(true).args(["completed", "not_executed"])))]
pub struct ResolveArgs {
    /// The key of one unknown outcome (or --all-unknown).
    #[arg(required_unless_present = "all_unknown")]
    pub key: Option<String>,
    /// Every unknown outcome of --route at once (with --not-executed): after an outage,
    /// once the upstream's records show none of them ran. Intents still in flight are
    /// never touched.
    #[arg(long, conflicts_with_all = ["key", "completed"], requires = "not_executed")]
    pub all_unknown: bool,
    /// With --all-unknown: only those first sent at or after this RFC 3339 time.
    #[arg(long, requires = "all_unknown")]
    pub sent_after: Option<String>,
    /// With --all-unknown: only those first sent before this RFC 3339 time.
    #[arg(long, requires = "all_unknown")]
    pub sent_before: Option<String>,
    /// With --all-unknown: count what would be resolved, change nothing.
    #[arg(long, requires = "all_unknown")]
    pub dry_run: bool,
    /// The call happened: record its response (with --status, --body-file, --header).
    #[arg(long, requires = "status")]
    pub completed: bool,
    /// The call never ran: let the next repeat forward it.
    #[arg(long)]
    pub not_executed: bool,
    /// The HTTP status the upstream answered.
    #[arg(long, conflicts_with = "not_executed")]
    pub status: Option<u16>,
    /// A file holding the body the upstream answered (any bytes).
    #[arg(long, conflicts_with = "not_executed")]
    pub body_file: Option<PathBuf>,
    /// A response header, `name: value` (repeatable), e.g. `content-type: application/json`.
    #[arg(long = "header", conflicts_with = "not_executed")]
    pub headers: Vec<String>,
    #[command(flatten)]
    pub target: KeyTarget,
}

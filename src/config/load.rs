//! Entry points: a file, a string, or no file at all (`--upstream URL`).
//!
//! Every path ends in the same place: one walk over the document that returns either a
//! [`Config`] (with its warnings) or every error found.

use std::path::Path;

use http::Method;

use super::error::{ConfigError, ConfigErrors};
use super::walk::Walker;
use super::{defaults, env, routes, sections, yaml, Config};

impl Config {
    /// Load and validate a YAML file; `${VAR}` reads the process environment.
    pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
        Self::load_with_env(path, env::process_env)
    }

    /// [`Config::load`] with `${VAR}` looked up through `env` (tests inject variables).
    pub fn load_with_env(
        path: &Path,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigErrors> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigErrors::single(Some(path), format!("cannot read the file: {e}")))?;
        Self::from_yaml_str_with_env(&text, Some(path), env)
    }

    /// Parse and validate YAML text; `source` names the file in messages.
    pub fn from_yaml_str(text: &str, source: Option<&Path>) -> Result<Config, ConfigErrors> {
        Self::from_yaml_str_with_env(text, source, env::process_env)
    }

    /// [`Config::from_yaml_str`] with `${VAR}` looked up through `env`.
    pub fn from_yaml_str_with_env(
        text: &str,
        source: Option<&Path>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigErrors> {
        let root = yaml::parse(text).map_err(|e| ConfigErrors::finish(vec![e], source))?;
        let mut w = Walker::new(&env);
        let config = walk(&mut w, &root);
        w.unknown_fields();
        match config {
            Some(mut config) if w.errors.is_empty() => {
                config.source = source.map(Path::to_path_buf);
                if let (Some(enc), Some(file)) = (config.store.encryption.as_mut(), source) {
                    enc.places.in_file(file);
                }
                config.warnings = ConfigErrors::finish(w.warnings, source)
                    .into_iter()
                    .map(|warning| warning.to_string())
                    .collect();
                Ok(config)
            }
            _ => Err(ConfigErrors::finish(w.errors, source)),
        }
    }

    /// The SPEC's no-config defaults for `idem serve --upstream URL`: memory store and one
    /// route `default` (POST/PUT/PATCH/DELETE on `/{path*}`, key
    /// `{header.idempotency-key}`, `require_key: false`).
    pub fn for_upstream(url: &str) -> Result<Config, ConfigErrors> {
        let url = sections::parse_upstream_url(url)
            .map_err(|e| ConfigErrors(vec![ConfigError::new(None, "upstream.url", e)]))?;
        defaults::for_upstream(url).map_err(|e| ConfigErrors::single(None, e))
    }
}

/// Catch-all routes for POST, PUT, PATCH and DELETE (the chart's default): what passes
/// through is GET, HEAD, OPTIONS and the like, which have no side effect to repeat.
fn catch_alls_take_every_unsafe_method(
    routes: &[std::sync::Arc<crate::policy::RoutePolicy>],
) -> bool {
    [Method::POST, Method::PUT, Method::PATCH, Method::DELETE]
        .iter()
        .all(|m| {
            routes
                .iter()
                .any(|r| r.methods.contains(m) && r.path.matches_every_path())
        })
}

/// Walk the whole document; `None` if a required part is missing or invalid.
fn walk(w: &mut Walker<'_>, root: &yaml::Node) -> Option<Config> {
    let f = w.fields(root, "");
    let listen = w.field(&f, "listen", sections::parse_listen);
    let server = sections::server(w, f.get("server"));
    let admin = sections::admin(w, f.get("admin"));
    let upstream = sections::upstream(w, f.get("upstream"), &f);
    let store = sections::store(w, f.get("store"));
    let telemetry = super::telemetry::read(w, f.get("telemetry"));
    let default = w.choice(&f, "default");
    let routes = routes::read(w, f.get("defaults"), f.get("routes"));
    if routes.is_empty() && f.get("routes").is_none() {
        w.warn(
            f.pos(),
            "routes",
            "no routes: every request is handled by `default` without idempotency",
        );
    }
    if let (Some(read), Some(upstream)) = (server.body_read_timeout, &upstream) {
        // A body still arriving when the upstream would have given up holds its buffer
        // (and a `max_buffered_bytes` share) for nothing.
        if read > upstream.timeout {
            let at = f.get("server").map_or(f.pos(), |n| n.pos);
            w.error(
                at,
                "server.body_read_timeout",
                format!(
                    "{} is longer than upstream.timeout ({}); a request body must arrive within the upstream's own timeout",
                    humantime::format_duration(read),
                    humantime::format_duration(upstream.timeout)
                ),
            );
        }
    }
    for (i, route) in routes.iter().enumerate() {
        // Such a body could never be read: a permanent refusal dressed as a 503.
        if route.max_request_bytes > server.max_buffered_bytes {
            let at = f.get("routes").map_or(f.pos(), |n| n.pos);
            w.warn(
                at,
                &format!("routes[{i}].max_request_bytes"),
                format!(
                    "route {:?} accepts bodies of {} bytes, more than server.max_buffered_bytes ({}): such a body is always 503 overloaded; raise max_buffered_bytes",
                    route.name, route.max_request_bytes, server.max_buffered_bytes
                ),
            );
        }
    }
    let default = default.map_or(super::DefaultAction::Passthrough, |a| a.value);
    if default == super::DefaultAction::Passthrough
        && !routes.is_empty()
        && !catch_alls_take_every_unsafe_method(&routes)
    {
        // Issue 46 §6: a request no route matches (a method or path the routes do not
        // cover) is forwarded without idempotency, and runs as often as it is sent.
        let at = f.get("default").map_or(f.pos(), |n| n.pos);
        w.warn(
            at,
            "default",
            "passthrough beside protected routes: a request no route matches is forwarded \
             unprotected and runs again when repeated; for an API that is all side effects, \
             set default: reject (404 for unmatched requests)",
        );
    }
    Some(Config {
        listen: listen.map_or(defaults::LISTEN, |a| a.value),
        server,
        admin,
        upstream: upstream?,
        store,
        telemetry,
        default,
        routes,
        warnings: Vec::new(),
        source: None,
    })
}

//! TLS client settings shared by the upstream (https) and Redis (rediss) connections:
//! rustls with the ring provider and the system's trust store.

use std::sync::Once;

use rustls::{ClientConfig, RootCertStore};

/// Make ring the process-wide rustls provider (redis-rs looks the default up).
pub fn install_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// A client config trusting the system's roots. Certificates that fail to parse are
/// skipped (and logged); with no roots at all, https upstreams fail to connect (502)
/// rather than being trusted blindly.
pub fn client_config() -> ClientConfig {
    install_crypto_provider();
    let mut roots = RootCertStore::empty();
    let found = rustls_native_certs::load_native_certs();
    for error in &found.errors {
        tracing::warn!(%error, "could not load a trusted certificate");
    }
    let (added, ignored) = roots.add_parsable_certificates(found.certs);
    if ignored > 0 {
        tracing::warn!(ignored, "ignored unparsable trusted certificates");
    }
    tracing::debug!(added, "loaded trusted certificates");
    ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth()
}

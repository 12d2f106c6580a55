# syntax=docker/dockerfile:1.7
#
# idem container image.
#
#   docker build -t idem:dev .                     # BuildKit (Docker >= 23 default)
#   docker run --rm -p 8080:8080 -p 9901:9901 \
#     -v "$PWD/config/idem.yaml:/etc/idem/idem.yaml:ro" idem:dev
#
# Runtime contract (docs/kubernetes.md):
#   - entrypoint `/usr/local/bin/idem`, default command `serve --config /etc/idem/idem.yaml`;
#     `docker run IMAGE check --config /etc/idem/idem.yaml` validates a mounted file.
#   - the config is NOT baked in: mount it at /etc/idem/idem.yaml (a ConfigMap in Kubernetes).
#   - runs as the distroless `nonroot` user, UID/GID 65532; needs no writable filesystem.
#   - ports: 8080 proxy listener, 9901 admin listener (/healthz, /readyz, /metrics). The
#     admin listener binds 127.0.0.1 unless the config or `--admin-listen` says otherwise.
#   - SIGTERM drains within `server.shutdown_grace` (default 25s); SIGHUP reloads routes.

ARG RUST_VERSION=1.95

# --- build ------------------------------------------------------------------------------
FROM rust:${RUST_VERSION}-slim-bookworm AS build
WORKDIR /build

# The build context (allow-listed by .dockerignore: manifests and sources only) is
# bind-mounted rather than copied, and the cargo registry, git checkouts and the target
# directory live in BuildKit cache mounts: an edit to src/ recompiles only the idem crate,
# never its ~100 dependencies, and no layer carries sources or build output. The binary
# is copied out of the cache mount inside the same RUN (cache mounts are not in images).
ENV CARGO_TARGET_DIR=/cargo-target
RUN --mount=type=bind,target=/build \
    --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/usr/local/cargo/git,sharing=locked \
    --mount=type=cache,target=/cargo-target,sharing=locked \
    cargo build --release --locked --bin idem \
    && install -D -m 0755 /cargo-target/release/idem /out/idem

# --- runtime ----------------------------------------------------------------------------
# distroless/cc: glibc, libgcc_s, CA certificates, tzdata; no shell, no package manager.
# Same Debian release (12, bookworm) as the builder, so the glibc the binary links matches.
FROM gcr.io/distroless/cc-debian12:nonroot AS runtime

ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
ARG SOURCE=unknown

LABEL org.opencontainers.image.title="idem" \
      org.opencontainers.image.description="Sidecar reverse proxy that makes side-effecting tool calls safe to repeat" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.base.name="gcr.io/distroless/cc-debian12:nonroot"

COPY --from=build --chown=0:0 --chmod=0755 /out/idem /usr/local/bin/idem

# Numeric, so Kubernetes can verify `runAsNonRoot` without reading /etc/passwd.
USER 65532:65532
WORKDIR /
EXPOSE 8080 9901
# Log filter (tracing EnvFilter syntax); `serve --log-format json` for JSON lines.
ENV RUST_LOG=info

ENTRYPOINT ["/usr/local/bin/idem"]
CMD ["serve", "--config", "/etc/idem/idem.yaml"]

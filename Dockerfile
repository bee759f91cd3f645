# syntax=docker/dockerfile:1
# Build: docker build -t sluice .
# Run:   docker run -p 8080:8080 -p 9090:9090 -v $PWD/sluice.toml:/etc/sluice/sluice.toml:ro sluice
# The config is read from /etc/sluice/sluice.toml (override with SLUICE_CONFIG).
# In the container, set [server] listen = "0.0.0.0:8080" and [admin] listen = "0.0.0.0:9090";
# as Envoy's rate limit service, also [rls] listen = "0.0.0.0:8081" and publish 8081.

FROM rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY benches ./benches
COPY config ./config
RUN cargo build --release --locked --bin sluice && strip target/release/sluice

FROM debian:bookworm-slim
RUN groupadd --system --gid 10001 sluice \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin sluice \
 && mkdir -p /etc/sluice
COPY --from=build /src/target/release/sluice /usr/local/bin/sluice
COPY config/sluice.toml /etc/sluice/sluice.toml
ENV SLUICE_CONFIG=/etc/sluice/sluice.toml
# Numeric, so that the kubelet can tell it is not root: with runAsNonRoot and
# no runAsUser it refuses to start a container whose USER is a name
# (deploy/kubernetes sets runAsUser 10001 too; docs/kubernetes.md).
USER 10001:10001
EXPOSE 8080 9090 8081
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/sluice"]
CMD ["run"]

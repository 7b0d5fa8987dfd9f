# syntax=docker/dockerfile:1
# browserd: one image for every role (serve, api, worker, migrate, keys create, run).
# Checked by scripts/check-deploy (hadolint and the image check list); see docs/src/self-hosting.md.

FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
# Queries are checked against the committed .sqlx data: no database is needed to build.
ENV SQLX_OFFLINE=true
RUN cargo build --release --locked -p browserd \
    && install -D -m 0755 target/release/browserd /out/browserd

FROM debian:bookworm-slim
# chromium-headless-shell: the browser the worker drives (the headless-only build: no window, and
# no top-chrome renderer, per task; docs/src/benchmarks.md). The full build (package chromium,
# `--chrome /usr/bin/chromium`) is not in the image; a derived image may add it. Fonts, so that
# screenshots of real sites are legible:
# Latin metric-compatible (liberation), CJK and colour emoji (noto). tini is PID 1: it forwards
# SIGTERM to browserd only (the worker then hands its tasks back) and reaps Chrome's helper
# processes. curl runs the HEALTHCHECK.
# Versions are not pinned on purpose: Debian bookworm(-security) ships Chromium's security updates
# as new versions and drops the old ones, so a pin would break the build (hadolint DL3008 ignored
# in .hadolint.yaml).
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        ca-certificates \
        chromium-headless-shell \
        curl \
        fonts-liberation \
        fonts-noto-cjk \
        fonts-noto-color-emoji \
        tini \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 browserd \
    && useradd --system --uid 10001 --gid browserd --create-home --home-dir /home/browserd \
        --shell /usr/sbin/nologin browserd
COPY --from=build /out/browserd /usr/local/bin/browserd
# Numeric, so that Kubernetes can verify runAsNonRoot.
USER 10001:10001
WORKDIR /home/browserd
ENV BROWSERD_LISTEN=0.0.0.0:8080 \
    BROWSERD_LOG_FORMAT=json \
    BROWSERD_CHROME=/usr/bin/chromium-headless-shell
EXPOSE 8080
# /readyz answers 200 when the process serves HTTP and Postgres answers. `worker` and `migrate`
# serve no HTTP: compose disables this check for them (Kubernetes ignores it).
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["curl", "-fsS", "-o", "/dev/null", "http://127.0.0.1:8080/readyz"]
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/browserd"]
CMD ["serve"]

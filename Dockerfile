# syntax=docker/dockerfile:1
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
# Queries are checked against the committed .sqlx data; no database needed to build.
ENV SQLX_OFFLINE=true
RUN cargo build --release --locked -p browserd

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates chromium fonts-liberation \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --create-home --home-dir /home/browserd browserd
COPY --from=build /src/target/release/browserd /usr/local/bin/browserd
USER browserd
ENV BROWSERD_LISTEN=0.0.0.0:8080 \
    BROWSERD_LOG_FORMAT=json
EXPOSE 8080
ENTRYPOINT ["browserd"]
CMD ["serve"]

# ringstream in a container: a release build in the Rust image, copied into a
# slim Debian image that runs it as an unprivileged user with the data in a
# volume. docs/operations.md ("In a container") explains the flags; in short:
#
#   docker build -t ringstream .
#   docker run --rm -p 4437:4437 -v ringstream-data:/var/lib/ringstream \
#     --ulimit memlock=-1 --security-opt seccomp=ringstream-seccomp.json ringstream
#
# Docker's default seccomp profile blocks io_uring_setup, io_uring_enter and
# io_uring_register, which ringstream needs for all its I/O: without a
# profile that allows them (or seccomp=unconfined) it exits at boot with
# "io_uring is unavailable" (status 78). Not built on the development
# machine (no container engine there): try it before relying on it.

# --- build -----------------------------------------------------------------------
FROM rust:1.95-slim-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends git && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# The whole source tree (see .dockerignore); .git lets --version name the commit.
COPY . .
RUN cargo build --release --locked --bin ringstream \
 && install -m 0755 target/release/ringstream /usr/local/bin/ringstream \
 && /usr/local/bin/ringstream --version

# --- run -------------------------------------------------------------------------
FROM debian:bookworm-slim
RUN useradd --system --uid 10001 --home-dir /var/lib/ringstream --shell /usr/sbin/nologin ringstream \
 && install -d -o ringstream -g ringstream -m 0700 /var/lib/ringstream
COPY --from=build /usr/local/bin/ringstream /usr/local/bin/ringstream
USER ringstream
VOLUME ["/var/lib/ringstream"]
EXPOSE 4437
ENV RINGSTREAM_LISTEN=0.0.0.0:4437 \
    RINGSTREAM_DATA_DIR=/var/lib/ringstream \
    RINGSTREAM_LOG_FORMAT=json
# SIGTERM drains and syncs (docker stop waits 10 s by default; the server's
# own limit is 10 s too: give it --stop-timeout 15).
STOPSIGNAL SIGTERM
HEALTHCHECK NONE
ENTRYPOINT ["/usr/local/bin/ringstream"]

# syntax=docker/dockerfile:1
# The rogerwilco gatekeeper's image: `docker build -t rogerwilco-gatekeeper .` from the repository's root.
#
#   docker run --rm -v "$PWD/gk.yaml:/etc/gatekeeper/gatekeeper.yaml:ro" -p 9108:9108 rogerwilco-gatekeeper
#   docker run --rm rogerwilco-gatekeeper check --help            (any CLI command: the entrypoint is `gatekeeper`)
#
# Two stages: "build" makes a virtual environment with the project and its pinned runtime dependencies
# (deploy/image/constraints.txt), compiling the native extension (native/, Rust) on the full Python image of the
# same version with the Rust toolchain copied from the pinned Rust image; the final stage copies only that
# environment onto a slim Python, with no pip cache, no compiler, no toolchain and no source tree, and runs as an
# unprivileged user (uid 10001) that can write only /tmp.
# The HTTP server (metrics, /healthz, /readyz, the API) listens on 0.0.0.0:9108 in the container: GK_HTTP__HOST is
# the one GK_ variable the image sets, and like every GK_ variable it overrides the config file's http.host. Logs are
# JSON (log_format auto: JSON when stderr is not a terminal).

ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm
ARG PYTHON_BUILD_IMAGE=python:3.11.14-bookworm
ARG RUST_IMAGE=rust:1.95.0-slim-bookworm

FROM ${RUST_IMAGE} AS rust

FROM ${PYTHON_BUILD_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    RUSTUP_HOME=/usr/local/rustup \
    CARGO_HOME=/usr/local/cargo \
    PATH=/usr/local/cargo/bin:$PATH
COPY --from=rust /usr/local/rustup /usr/local/rustup
COPY --from=rust /usr/local/cargo /usr/local/cargo
WORKDIR /src
COPY pyproject.toml README.md ./
COPY deploy/image/constraints.txt deploy/image/constraints.txt
COPY native native
COPY rwcore rwcore
COPY gatekeeper gatekeeper
RUN python -m venv /opt/gatekeeper \
    && /opt/gatekeeper/bin/pip install --no-cache-dir --constraint deploy/image/constraints.txt /src \
    && /opt/gatekeeper/bin/gatekeeper version

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="rogerwilco gatekeeper" \
      org.opencontainers.image.description="Enforces the RW1 handoff protocol between AI agents on Kafka" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 gatekeeper \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin gatekeeper
COPY --from=build /opt/gatekeeper /opt/gatekeeper
ENV PATH=/opt/gatekeeper/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    GK_HTTP__HOST=0.0.0.0
USER 10001:10001
WORKDIR /tmp
EXPOSE 9108
ENTRYPOINT ["gatekeeper"]
CMD ["run", "--config", "/etc/gatekeeper/gatekeeper.yaml"]

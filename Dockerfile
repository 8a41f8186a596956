# syntax=docker/dockerfile:1
# One small image with both programs: `hami-collector` (the default command)
# and `hami-agent`. Build: make image IMAGE=<registry>/hami-usage-collector:<tag>
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# Build stage: the project as a wheel, installed with its dependencies into a
# virtualenv from binary wheels only (no compiler, none needed).
FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY collector ./collector
COPY agent ./agent
COPY core ./core
COPY simulator ./simulator
RUN python -m pip wheel --no-deps --wheel-dir /wheels . \
 && python -m venv /opt/hami \
 && /opt/hami/bin/pip install --only-binary :all: /wheels/*.whl \
 && /opt/hami/bin/pip uninstall --yes pip

# Final stage: the slim base (no compilers), the virtualenv, a non-root user.
FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=""
LABEL org.opencontainers.image.title="hami-usage-collector" \
      org.opencontainers.image.description="One cluster-wide, correctly labelled view of real-time GPU usage for HAMi, Volcano vGPU, KAI and HAMi-DRA clusters: collector and node agent." \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.vendor="hami-usage-collector"
RUN groupadd --system --gid 65532 hami \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin hami
COPY --from=build /opt/hami /opt/hami
# The root filesystem is read-only in the chart: bytecode was compiled at install.
ENV PATH=/opt/hami/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
EXPOSE 9396 9397
CMD ["hami-collector", "serve"]

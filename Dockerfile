# syntax=docker/dockerfile:1
# Two images from one source, each with its own program's dependencies only:
#   target collector (the default): `hami-collector serve`   make image IMAGE=<registry>/hami-usage-collector:<tag>
#   target agent: `hami-agent run`, on every GPU node          make image-agent IMAGE_AGENT=<registry>/hami-usage-collector-agent:<tag>
# scripts/check-agent-install runs the agent's wheel and virtualenv steps below
# (`make wheel-check`) and checks what pip installed.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# The project as a wheel, built once for both images.
FROM ${PYTHON_IMAGE} AS wheel
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY collector ./collector
COPY agent ./agent
COPY core ./core
COPY simulator ./simulator
RUN python -m pip wheel --no-deps --wheel-dir /wheels .

# Each program's virtualenv: the wheel with that program's extra, from binary
# wheels only (no compiler, none needed), then pip itself removed.
FROM wheel AS agent-venv
RUN python -m venv /opt/hami \
 && /opt/hami/bin/pip install --only-binary :all: "$(echo /wheels/*.whl)[agent]" \
 && /opt/hami/bin/pip uninstall --yes pip

FROM wheel AS collector-venv
RUN python -m venv /opt/hami \
 && /opt/hami/bin/pip install --only-binary :all: "$(echo /wheels/*.whl)[collector]" \
 && /opt/hami/bin/pip uninstall --yes pip

# What both images share: the slim base (no compilers), a non-root user, the environment.
FROM ${PYTHON_IMAGE} AS runtime
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=""
LABEL org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.vendor="hami-usage-collector"
RUN groupadd --system --gid 65532 hami \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin hami
# The root filesystem is read-only in the chart: bytecode was compiled at install.
ENV PATH=/opt/hami/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532

# The node agent: HAMi-core's regions, NVML and the kubelet's PodResources, pushed to the collector.
FROM runtime AS agent
LABEL org.opencontainers.image.title="hami-usage-collector-agent" \
      org.opencontainers.image.description="The node agent of hami-usage-collector: reads HAMi-core's shared regions, NVML and the kubelet's PodResources on a GPU node and pushes them to the collector."
COPY --from=agent-venv /opt/hami /opt/hami
USER 65532:65532
EXPOSE 9397
CMD ["hami-agent", "run"]

# The collector, last so that a build without --target gives it, as before.
FROM runtime AS collector
LABEL org.opencontainers.image.title="hami-usage-collector" \
      org.opencontainers.image.description="One cluster-wide, correctly labelled view of real-time GPU usage for HAMi, Volcano vGPU, KAI and HAMi-DRA clusters: the collector."
COPY --from=collector-venv /opt/hami /opt/hami
USER 65532:65532
EXPOSE 9396
CMD ["hami-collector", "serve"]

# One image for every role: `api` (default), `daemon`, `broker`, `dev`.
#   docker build -t timer-service:0.1.0 .
#   docker run --rm -p 8080:8080 timer-service:0.1.0            # REST API
#   docker run --rm timer-service:0.1.0 daemon                  # scan daemon (:9101)
#   docker run --rm timer-service:0.1.0 broker                  # notifier (:9102)
# Both stages use the same base tag, so the venv built in the first stage
# (whose interpreter is a symlink to /usr/local/bin/python3.11) runs as is
# in the second.

FROM python:3.11.11-slim-bookworm AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
# The locks first: the dependency layer is rebuilt only when they change.
COPY requirements/lock.txt requirements/build-lock.txt ./requirements/
# Every dependency from the hashed lock (all ship manylinux wheels: no
# compiler needed), so two builds of one commit install the same files.
RUN python -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-cache-dir --require-hashes -r requirements/lock.txt

COPY pyproject.toml README.md LICENSE ./
COPY timer_service ./timer_service
COPY daemon ./daemon
COPY broker ./broker

# The project's wheel, built with the pinned backend (no build isolation, so
# nothing unpinned is fetched), installed alone into the venv.
RUN python -m venv /opt/build \
 && /opt/build/bin/pip install --no-cache-dir --require-hashes -r requirements/build-lock.txt \
 && /opt/build/bin/pip wheel --no-cache-dir --no-deps --no-build-isolation --wheel-dir /wheels . \
 && /opt/venv/bin/pip install --no-cache-dir --no-deps /wheels/callback_timer_service-*.whl \
 && /opt/venv/bin/pip check \
 && /opt/venv/bin/timer-service --help > /dev/null


FROM python:3.11.11-slim-bookworm

LABEL org.opencontainers.image.title="timer-service" \
      org.opencontainers.image.description="Distributed timer service: persisted delayed HTTP callbacks" \
      org.opencontainers.image.licenses="Apache-2.0"

# A fixed numeric uid/gid so Kubernetes can check runAsNonRoot without a
# user database lookup.
RUN groupadd --system --gid 10001 timer \
 && useradd --system --uid 10001 --gid timer --no-create-home \
      --home-dir /nonexistent --shell /usr/sbin/nologin timer

COPY --from=build /opt/venv /opt/venv

# Bytecode was compiled at install time; never write it at run time, so the
# root filesystem can be mounted read-only. Listen on all interfaces: inside a
# container 127.0.0.1 is unreachable from the probes and from Prometheus.
ENV PATH="/opt/venv/bin:${PATH}" \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    TIMER_HTTP_HOST=0.0.0.0 \
    TIMER_METRICS_HOST=0.0.0.0 \
    TIMER_DATA_DIR=/tmp/timer-data

WORKDIR /tmp
USER 10001:10001

EXPOSE 8080 9101 9102

# Kubernetes ignores HEALTHCHECK (it uses the probes in k8s/); this is for
# plain `docker run`. The role's port is not known here, so try the ones it
# can be on: the configured ones first, then the defaults of api/daemon/broker.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import os, sys, urllib.request\nports = [os.environ.get('TIMER_METRICS_PORT'), os.environ.get('TIMER_HTTP_PORT'), '8080', '9101', '9102']\nfor port in dict.fromkeys(p for p in ports if p):\n    try:\n        urllib.request.urlopen(f'http://127.0.0.1:{port}/healthz', timeout=2)\n        sys.exit(0)\n    except OSError:\n        pass\nsys.exit(1)"]

ENTRYPOINT ["timer-service"]
CMD ["api"]

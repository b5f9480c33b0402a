# One image for both entry points: ovserve-operator and ovserve-runtime (serving needs only openvino,
# openvino-genai and openvino-tokenizers; no torch, no exporter).
#
#   docker build -t ovserve:dev .                                   # public Python base (users with Docker)
#   buildah bud --layers --build-arg BASE=localhost/ovserve-base:1 -t localhost/ovserve:dev .   # hack/images.sh
#
# BASE must provide python3 (>= 3.11) with the venv module at /usr/bin/python3 or /usr/local/bin/python3.
# Layers: BASE | dependencies (rebuilt only when constraints.txt or pyproject.toml change) | the project (KBs).
# At run time nothing needs a shell: every entry point is an exec-form console script; the user is numeric.
ARG BASE=docker.io/library/python:3.11-slim-bookworm

# ---- deps: the runtime + operator dependency set from pyproject.toml, pinned by constraints.txt ----------
FROM ${BASE} AS deps
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
COPY constraints.txt pyproject.toml /build/
# The requirement list is read from pyproject ([project] dependencies + the runtime and operator extras,
# never dev), so the image cannot drift from the package; constraints.txt fixes every version.
# The .pth file puts /opt/ovserve/app (the project, installed in its own small layer below) on sys.path.
RUN python3 -m venv /opt/ovserve \
 && /opt/ovserve/bin/python -c "import tomllib; p = tomllib.load(open('/build/pyproject.toml', 'rb'))['project']; x = p['optional-dependencies']; print('\n'.join(p['dependencies'] + x['runtime'] + x['operator']))" > /build/requirements.txt \
 && /opt/ovserve/bin/pip install -c /build/constraints.txt -r /build/requirements.txt \
 && /opt/ovserve/bin/pip check \
 && /opt/ovserve/bin/python -c "import sysconfig; open(sysconfig.get_paths()['purelib'] + '/ovserve-app.pth', 'w').write('/opt/ovserve/app\n')"

# ---- app: the project itself (pure Python), installed next to the venv -----------------------------------
FROM deps AS app
COPY pyproject.toml /build/src/
COPY runtime /build/src/runtime
COPY operator /build/src/operator
RUN /opt/ovserve/bin/pip install --no-deps --no-build-isolation --target /opt/ovserve/app /build/src \
 && /opt/ovserve/app/bin/ovserve-runtime --help > /dev/null \
 && /opt/ovserve/app/bin/ovserve-operator --help > /dev/null

# ---- slim: the venv without the installers and test suites (nothing installs at run time) --------------
FROM deps AS slim
RUN /opt/ovserve/bin/pip uninstall -q -y pip setuptools wheel 2>/dev/null || true; \
    find /opt/ovserve -depth \( -name tests -o -name test -o -name testing \) -type d -path '*/site-packages/*/*' \
      -not -path '*/numpy/testing' -exec rm -rf {} + ; \
    rm -f /opt/ovserve/bin/activate* /opt/ovserve/bin/pip*

# ---- final ----------------------------------------------------------------------------------------------
FROM ${BASE}
LABEL org.opencontainers.image.title="ovserve" \
      org.opencontainers.image.description="ovserve: Kubernetes operator + OpenVINO GenAI serving runtime (ovserve-operator, ovserve-runtime)" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/ovserve/ovserve"
ENV VIRTUAL_ENV=/opt/ovserve \
    PATH=/opt/ovserve/app/bin:/opt/ovserve/bin:/usr/local/bin:/usr/bin:/bin \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 HOME=/tmp
COPY --from=slim /opt/ovserve /opt/ovserve
COPY --from=app /opt/ovserve/app /opt/ovserve/app
USER 10001:10001
WORKDIR /tmp
EXPOSE 8000
CMD ["ovserve-runtime", "--help"]

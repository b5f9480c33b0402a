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
 && /opt/ovserve/bin/pip install -c /build/constraints.txt "setuptools>=70.1" \
 && /opt/ovserve/bin/python -c "import sysconfig; open(sysconfig.get_paths()['purelib'] + '/ovserve-app.pth', 'w').write('/opt/ovserve/app\n')"

# ---- app: the project itself (pure Python), installed next to the venv. No network from here on (the
# setuptools of the deps layer builds it), so a code change rebuilds offline in seconds. -----------------
FROM deps AS app
COPY pyproject.toml /build/src/
COPY runtime /build/src/runtime
COPY operator /build/src/operator
RUN /opt/ovserve/bin/pip install --no-deps --no-build-isolation --no-index --target /opt/ovserve/app /build/src

# ---- slim: the venv without what serving never loads -------------------------------------------------------
# Installers (nothing installs at run time), test suites, C++ headers, the asyncio copy of the kubernetes
# client (kubernetes/aio, ~70 MB, imported by nothing), OpenVINO's non-IR frontends (ONNX, TF, TFLite,
# Paddle, PyTorch, JAX: loaded only to read those formats; ovserve serves OpenVINO IR), and openvino/tools
# (ovc, the model converter): `import openvino` imports it, and it forks a telemetry sender to
# google-analytics.com that hangs without DNS and is SIGTERMed after a timeout; the forked child shares the
# parent's asyncio signal wakeup fd, so the runtime received a SIGTERM ~2 s after Ready and shut down.
# The IR frontend, the CPU/GPU/NPU plugins and openvino_genai/openvino_tokenizers stay as shipped.
FROM deps AS slim
RUN sp=$(/opt/ovserve/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])") \
 && /opt/ovserve/bin/pip uninstall -q -y pip setuptools wheel \
 && find "$sp" -mindepth 2 -depth -type d \( -name tests -o -name test \) -exec rm -rf {} + \
 && rm -rf "$sp/kubernetes/aio" "$sp/openvino/include" "$sp/openvino/tools" \
 && for fe in onnx paddle pytorch tensorflow tensorflow_lite jax; do \
      rm -rf "$sp/openvino/libs/libopenvino_${fe}_frontend.so"* "$sp/openvino/frontend/$fe"; done \
 && rm -f /opt/ovserve/bin/activate* /opt/ovserve/bin/Activate.ps1 /opt/ovserve/bin/ovc /opt/ovserve/bin/benchmark_app \
      /opt/ovserve/bin/opt_in_out \
 && /opt/ovserve/bin/python -c "import openvino, openvino_genai, openvino_tokenizers, kopf, kubernetes.client, aiohttp, pydantic, prometheus_client, numpy, huggingface_hub; from PIL import features; assert all(features.check(f) for f in ('zlib', 'jpg', 'webp')), 'Pillow codecs'; import multiprocessing as m; assert not m.active_children(), 'import forked'; print('deps ok', openvino.__version__, openvino.Core().available_devices)"

# ---- final ----------------------------------------------------------------------------------------------
FROM ${BASE}
LABEL org.opencontainers.image.title="ovserve" \
      org.opencontainers.image.description="ovserve: Kubernetes operator + OpenVINO GenAI serving runtime (ovserve-operator, ovserve-runtime)" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV VIRTUAL_ENV=/opt/ovserve \
    PATH=/opt/ovserve/app/bin:/opt/ovserve/bin:/usr/local/bin:/usr/bin:/bin \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 HOME=/tmp
# A passwd/group entry for the numeric user: getpass.getuser() / pwd.getpwuid() (kopf's identity, among
# others) fail for a uid the image does not know. Build-time shell only.
RUN echo 'ovserve:x:10001:10001:ovserve:/tmp:/usr/sbin/nologin' >> /etc/passwd \
 && echo 'ovserve:x:10001:' >> /etc/group
COPY --from=slim /opt/ovserve /opt/ovserve
COPY --from=app /opt/ovserve/app /opt/ovserve/app
USER 10001:10001
WORKDIR /tmp
EXPOSE 8000
CMD ["ovserve-runtime", "--help"]

"""The local routing gateway of the routing tests (issue 39, docs/routing.md): GIE's endpoint picker (EPP) and Envoy
as processes of this machine, run inside the cluster's network namespace (pod addresses reachable, as from a
gateway pod), both built by `make routing` (hack/build-routing.sh). No stand-in: the real `epp` v1.5.0 watching a
real InferencePool, and Envoy 1.40 asking it per request over ext_proc (FULL_DUPLEX_STREAMED bodies), then
forwarding to the pod it named through an ORIGINAL_DST cluster keyed by the `x-gateway-destination-endpoint`
header: the shape of GIE's own test/testdata/envoy.yaml.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from ovserve_operator import routing

ROOT = Path(__file__).resolve().parents[2]
_API = "type.googleapis.com/envoy.extensions"
DESTINATION_HEADER = "x-gateway-destination-endpoint"  # what the EPP sets and Envoy's ORIGINAL_DST follows
EXT_PROC_TIMEOUT_S = 10
ROUTE_TIMEOUT_S = 600
START_TIMEOUT_S = 60


def routing_bin_dir() -> Path:
    """$ROUTING_BIN_DIR of hack/versions.env: where `make routing` puts epp, envoy and the CRD."""
    out = subprocess.run(
        ["bash", "-c", f". {ROOT / 'hack' / 'versions.env'} && echo $ROUTING_BIN_DIR"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return Path(out)


def missing_artefacts(bin_dir: Path) -> list[str]:
    """What `make routing` would build that is not there."""
    want = [bin_dir / "epp", bin_dir / "envoy", bin_dir / "crds" / "inferencepools.yaml"]
    return [str(p) for p in want if not p.exists()]


def install_pool_crd(cluster) -> str:
    """GIE's InferencePool CRD (of `make routing`) applied to the cluster and served; its name."""
    path = routing_bin_dir() / "crds" / "inferencepools.yaml"
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
    cluster.kubectl("wait", "--for", "condition=Established", "crd/inferencepools.inference.networking.k8s.io")
    cluster.wait_for(
        lambda: cluster.kubectl("get", "inferencepools", "-A", check=False).returncode == 0, 30, "pools served"
    )
    return "inferencepools.inference.networking.k8s.io"


def free_port() -> int:
    """A port free on every address: the EPP listens on all of them (":port"), and a port free on loopback alone may
    be held on the node's address by one of the cluster's many connections."""
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return s.getsockname()[1]


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _socket(port: int, host: str = "127.0.0.1") -> dict:
    return {"socket_address": {"address": host, "port_value": port}}


def envoy_config(listen_port: int, admin_port: int, picker_port: int, picker_host: str = "127.0.0.1") -> dict:
    """Envoy's bootstrap: one listener on loopback whose every request is handed to the picker (ext_proc: headers,
    bodies streamed both ways, trailers) and forwarded to the pod the picker named; the picker over TLS (the EPP
    serves a self-signed certificate: no verification, as in GIE's reference) and HTTP/2. `picker_host`: where it
    listens (a picker the operator runs in the cluster: its Service's address)."""
    ext_proc = {
        "name": "envoy.filters.http.ext_proc",
        "typed_config": {
            "@type": f"{_API}.filters.http.ext_proc.v3.ExternalProcessor",
            "grpc_service": {"envoy_grpc": {"cluster_name": "ext_proc"}, "timeout": f"{EXT_PROC_TIMEOUT_S}s"},
            "processing_mode": {
                "request_header_mode": "SEND",
                "response_header_mode": "SEND",
                "request_body_mode": "FULL_DUPLEX_STREAMED",
                "response_body_mode": "FULL_DUPLEX_STREAMED",
                "request_trailer_mode": "SEND",
                "response_trailer_mode": "SEND",
            },
            "message_timeout": f"{ROUTE_TIMEOUT_S}s",
        },
    }
    router = {
        "name": "envoy.filters.http.router",
        "typed_config": {
            "@type": f"{_API}.filters.http.router.v3.Router",
            "suppress_envoy_headers": True,
        },
    }
    hcm = {
        "@type": f"{_API}.filters.network.http_connection_manager.v3.HttpConnectionManager",
        "stat_prefix": "gateway",
        "route_config": {
            "name": "pool",
            "virtual_hosts": [
                {
                    "name": "pool",
                    "domains": ["*"],
                    "routes": [
                        {
                            "match": {"prefix": "/"},
                            "route": {
                                "cluster": "original_destination_cluster",
                                "timeout": f"{ROUTE_TIMEOUT_S}s",
                                "idle_timeout": f"{ROUTE_TIMEOUT_S}s",
                            },
                        }
                    ],
                }
            ],
        },
        "http_filters": [ext_proc, router],
    }
    h2 = {
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
            "@type": f"{_API}.upstreams.http.v3.HttpProtocolOptions",
            "explicit_http_config": {"http2_protocol_options": {}},
        }
    }
    return {
        "admin": {"address": _socket(admin_port)},
        "static_resources": {
            "listeners": [
                {
                    "name": "gateway",
                    "address": _socket(listen_port),
                    "filter_chains": [
                        {"filters": [{"name": "envoy.filters.network.http_connection_manager", "typed_config": hcm}]}
                    ],
                }
            ],
            "clusters": [
                {
                    "name": "original_destination_cluster",
                    "type": "ORIGINAL_DST",
                    "connect_timeout": "5s",
                    "lb_policy": "CLUSTER_PROVIDED",
                    "original_dst_lb_config": {"use_http_header": True, "http_header_name": DESTINATION_HEADER},
                },
                {
                    "name": "ext_proc",
                    "type": "STATIC",
                    "connect_timeout": "5s",
                    "lb_policy": "LEAST_REQUEST",
                    "typed_extension_protocol_options": h2,
                    "transport_socket": {
                        "name": "envoy.transport_sockets.tls",
                        "typed_config": {
                            "@type": f"{_API}.transport_sockets.tls.v3.UpstreamTlsContext",
                            "common_tls_context": {"validation_context": {}},
                        },
                    },
                    "load_assignment": {
                        "cluster_name": "ext_proc",
                        "endpoints": [{"lb_endpoints": [{"endpoint": {"address": _socket(picker_port, picker_host)}}]}],
                    },
                },
            ],
        },
    }


@dataclass
class Gateway:
    """EPP + Envoy for one InferencePool; `url` is Envoy's listener. Started by start(), stopped by stop().
    `picker_host`: Envoy alone, asking the picker the operator runs in the cluster (its Service's address, on
    routing.PICKER_GRPC_PORT) instead of a local EPP."""

    pool: str
    namespace: str
    kubeconfig: Path
    workdir: Path
    bin_dir: Path = field(default_factory=routing_bin_dir)
    listen_port: int = field(default_factory=free_port)
    admin_port: int = field(default_factory=free_port)
    picker_port: int = field(default_factory=free_port)
    picker_health_port: int = field(default_factory=free_port)
    picker_metrics_port: int = field(default_factory=free_port)
    hold_seconds: int | None = None  # a pool that scales to zero: the picker holds requests (flow control)
    targets_dir: Path | None = None  # Prometheus's file_sd directory: the picker registers there when set
    picker_host: str | None = None
    procs: list[subprocess.Popen] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listen_port}"

    @property
    def picker_log(self) -> Path:
        return self.workdir / "epp.log"

    @property
    def envoy_log(self) -> Path:
        return self.workdir / "envoy.log"

    def picker_args(self) -> list[str]:
        """The EPP's command line as the operator renders it (routing.picker_args), on this gateway's ports."""
        owner = routing.Owner(name=self.pool, namespace=self.namespace, labels={}, owner_reference={})
        args = routing.picker_args(owner)
        ports = {
            "--grpc-port": self.picker_port,
            "--grpc-health-port": self.picker_health_port,
            "--metrics-port": self.picker_metrics_port,
            "--config-file": self.workdir / routing.PICKER_CONFIG_FILE,
        }
        for flag, value in ports.items():
            args[args.index(flag) + 1] = str(value)
        return args

    def start(self) -> Gateway:
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / routing.PICKER_CONFIG_FILE).write_text(routing.picker_config_text(self.hold_seconds))
        envoy_yaml = self.workdir / "envoy.json"
        if self.picker_host is not None:  # the operator's picker, in the cluster
            self.picker_port = routing.PICKER_GRPC_PORT
        picker = (self.picker_port, self.picker_host or "127.0.0.1")
        envoy_yaml.write_text(json.dumps(envoy_config(self.listen_port, self.admin_port, *picker)))
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "NAMESPACE": self.namespace, "POD_NAME": "epp-local"}
        if self.picker_host is None:
            with open(self.picker_log, "w") as log:
                self.procs.append(
                    subprocess.Popen([str(self.bin_dir / "epp"), *self.picker_args()], stdout=log, stderr=log, env=env)
                )
        with open(self.envoy_log, "w") as log:
            envoy = [
                str(self.bin_dir / "envoy"),
                "-c",
                str(envoy_yaml),
                "--base-id",
                str(self.listen_port),  # its shared-memory id: one per Envoy of this machine
                "--log-level",
                "warn",
                "--concurrency",
                "2",
            ]
            self.procs.append(subprocess.Popen(envoy, stdout=log, stderr=log))
        self._wait_admin()
        if self.targets_dir is not None:
            self._register()
        return self

    @property
    def _target_file(self) -> Path:
        assert self.targets_dir is not None
        return self.targets_dir / f"epp-{self.namespace}-{self.pool}.json"

    def _register(self) -> None:
        """Prometheus scrapes the picker's metrics (its held requests: KEDA's activation), labelled with the pool's
        namespace as a picker pod's would be; written whole, then renamed, so Prometheus never reads half a file."""
        target = [{"targets": [f"127.0.0.1:{self.picker_metrics_port}"], "labels": {"namespace": self.namespace}}]
        tmp = self._target_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(target))
        tmp.rename(self._target_file)

    def _wait_admin(self) -> None:
        """Until Envoy is ready and the picker listens for ext_proc; a process that exits fails at once."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}/ready", timeout=2) as r:
                    if r.status == 200 and (self.picker_host is not None or listening(self.picker_port)):
                        return
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.2)
        raise RuntimeError(f"envoy or the picker not ready after {START_TIMEOUT_S}s:\n{self.logs()}")

    def check_alive(self) -> None:
        for p in self.procs:
            if p.poll() is not None:
                raise RuntimeError(f"{p.args[0]} exited {p.returncode}:\n{self.logs()}")

    def picker_metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.picker_metrics_port}/metrics", timeout=5) as r:
            return r.read().decode()

    def logs(self, limit: int = 6000) -> str:
        parts = []
        for path in (self.picker_log, self.envoy_log):
            if path.exists():
                parts.append(f"--- {path.name}\n{path.read_text(errors='replace')[-limit:]}")
        return "\n".join(parts)

    def stop(self) -> None:
        if self.targets_dir is not None:
            self._target_file.unlink(missing_ok=True)
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def main(argv: list[str] | None = None) -> int:
    """Run the local gateway in front of one pool until interrupted (docs/routing.md): inside the cluster's network
    namespace, e.g. `hack/cluster.sh exec .venv/bin/python -m tests.routing.gateway --namespace NS --pool NAME`."""
    import argparse
    import signal
    import tempfile

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--namespace", required=True, help="the InferencePool's namespace")
    parser.add_argument("--pool", required=True, help="the InferencePool's name (the LLMServing's)")
    parser.add_argument("--port", type=int, default=0, help="Envoy's listener on 127.0.0.1 (default: a free port)")
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG", ""), help="default: $KUBECONFIG")
    parser.add_argument(
        "--picker-host", help="Envoy alone, asking the picker the operator runs (spec.routing.picker) at this address"
    )
    args = parser.parse_args(argv)
    missing = missing_artefacts(routing_bin_dir())
    if missing:
        parser.error(f"run `make routing` first: missing {', '.join(missing)}")
    workdir = Path(tempfile.mkdtemp(prefix="ovserve-gateway-"))
    gw = Gateway(
        pool=args.pool,
        namespace=args.namespace,
        kubeconfig=Path(args.kubeconfig),
        workdir=workdir,
        picker_host=args.picker_host,
    )
    if args.port:
        gw.listen_port = args.port
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    gw.start()
    print(f"gateway for pool {args.namespace}/{args.pool} at {gw.url} (logs in {workdir})", flush=True)
    try:
        while not stopping and all(p.poll() is None for p in gw.procs):
            time.sleep(0.5)
    finally:
        gw.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

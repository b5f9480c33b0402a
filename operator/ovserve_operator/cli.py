"""ovserve-operator: run the LLMServing operator (kopf), gated by a leader Lease.

Configuration comes from the environment (OVSERVE_*; see docs/operator.md); the flags below
override it. Exit codes: 0 on a clean stop (SIGTERM/SIGINT), 1 when leadership was lost (the
process exits so that its pod restarts as a clean standby), 2 on bad configuration.
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import logging
import signal
import sys
import threading
from typing import Any

from .settings import Settings, configure_kopf

log = logging.getLogger("ovserve_operator")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ovserve-operator",
        description="Kubernetes operator for LLMServing (ovserve.dev/v1alpha1): runs the ovserve runtime and "
        "records which pipeline it really resolved.",
        epilog="Environment: OVSERVE_WATCH_NAMESPACES, OVSERVE_RUNTIME_IMAGE, "
        "OVSERVE_RUNTIME_IMAGE_PULL_POLICY, "
        "OVSERVE_GPU_RESOURCE, OVSERVE_GPU_NODE_SELECTOR, OVSERVE_LEADER_ELECTION, OVSERVE_LEASE_NAMESPACE, "
        "OVSERVE_LEASE_NAME, POD_NAME, OVSERVE_HEALTH_PORT, KUBECONFIG. Flags override the environment.",
    )
    scope = p.add_mutually_exclusive_group()
    scope.add_argument(
        "-n",
        "--namespace",
        action="append",
        default=None,
        metavar="NS",
        help="watch this namespace (repeatable; default: OVSERVE_WATCH_NAMESPACES or all)",
    )
    scope.add_argument(
        "-A",
        "--all-namespaces",
        "--clusterwide",
        action="store_true",
        help="watch the whole cluster (overrides OVSERVE_WATCH_NAMESPACES)",
    )
    le = p.add_mutually_exclusive_group()
    le.add_argument(
        "--leader-election",
        dest="leader_election",
        action="store_true",
        default=None,
        help="act only while holding the Lease (default: OVSERVE_LEADER_ELECTION, true)",
    )
    le.add_argument(
        "--no-leader-election",
        dest="leader_election",
        action="store_false",
        help="act at once (only safe with a single replica)",
    )
    p.add_argument("--lease-namespace", help="namespace of the Lease (default: POD_NAMESPACE or default)")
    p.add_argument("--lease-name", help="name of the Lease (default: ovserve-operator)")
    p.add_argument("--identity", help="holder identity (default: POD_NAME or hostname-pid)")
    p.add_argument("--health-port", type=int, help="port of /healthz and /metrics (default 8080; 0 = any)")
    p.add_argument("--runtime-image", help="runtime image (default: OVSERVE_RUNTIME_IMAGE)")
    p.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="default INFO")
    p.add_argument("--version", action="store_true", help="print versions and exit")
    return p


def settings_from(args: argparse.Namespace, env: Any = None) -> Settings:
    s = Settings.from_env(env)
    changes: dict[str, Any] = {}
    if args.all_namespaces:
        changes["watch_namespaces"] = ()
    elif args.namespace:
        changes["watch_namespaces"] = tuple(n for ns in args.namespace for n in ns.split(",") if n)
    if args.leader_election is not None:
        changes["leader_election"] = args.leader_election
    for attr in ("lease_namespace", "lease_name", "identity", "health_port", "runtime_image", "log_level"):
        value = getattr(args, attr)
        if value is not None:
            changes[attr] = value
    return s.replace(**changes) if changes else s


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.version:
        import kopf
        import kubernetes

        print(
            f"ovserve-operator 0.1.0 (kopf {kopf.__version__ if hasattr(kopf, '__version__') else '?'}, "
            f"kubernetes {kubernetes.__version__})"
        )
        return 0
    try:
        settings = settings_from(args)
    except ValueError as e:
        print(f"ovserve-operator: configuration error: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=getattr(logging, settings.log_level, logging.INFO),
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1` dumps every thread's stack
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    return run(settings)


def run(settings: Settings) -> int:
    import kopf

    from . import handlers  # noqa: F401  (registers kopf's startup and cleanup handlers)
    from .health import HealthState, serve
    from .kube import Kube, LeaseAdapter
    from .leader import LeaderElector

    health = HealthState()
    try:
        server = serve(health, settings.health_port)
    except OSError as e:
        log.error("cannot listen on health port %s: %s", settings.health_port, e)
        return 2
    kube = Kube(pool_size=2 * settings.api_threads + 2)  # both pools, the Lease and the seed's LIST
    kube.warm_up()
    # what kopf's startup handler builds the Controller from (handlers.py): kopf's memo, not a module global
    memo = kopf.Memo(settings=settings, kube=kube, health=health)

    stop = threading.Event()  # process stop (signal)
    # kopf's loop is ours, and its stop flag an asyncio.Event set thread-safely: a threading.Event
    # flag would park a default-executor thread in wait() that blocks the loop's shutdown.
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    kopf_stop = asyncio.Event()

    def stop_kopf() -> None:
        loop.call_soon_threadsafe(kopf_stop.set)

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("signal %s: stopping", signal.Signals(signum).name)
        stop.set()
        stop_kopf()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    elector: LeaderElector | None = None
    if settings.leader_election:
        elector = LeaderElector(
            LeaseAdapter(kube),
            namespace=settings.lease_namespace,
            name=settings.lease_name,
            identity=settings.identity,
            lease_duration=settings.lease_duration_s,
            renew_deadline=settings.renew_deadline_s,
            retry_period=settings.retry_period_s,
        )
        elector_thread = threading.Thread(target=elector.run, args=(stop,), name="leader-election", daemon=True)
        elector_thread.start()
        health.role = "standby"
        log.info(
            "standby: waiting for lease %s/%s as %s",
            settings.lease_namespace,
            settings.lease_name,
            settings.identity,
        )
        while not stop.is_set() and not elector.is_leader.wait(0.5):
            pass
        if stop.is_set():
            server.shutdown()
            return 0

        def watch_leadership() -> None:
            while not stop.is_set():
                if elector.lost.wait(0.5):
                    stop_kopf()
                    return

        threading.Thread(target=watch_leadership, name="leadership-watch", daemon=True).start()

    health.role = "leader"
    kopf_settings = kopf.OperatorSettings()
    configure_kopf(kopf_settings, settings)
    scope = "cluster-wide" if settings.clusterwide else f"namespaces {','.join(settings.watch_namespaces)}"
    log.info("starting kopf (%s) as %s", scope, settings.identity)
    try:
        kopf.run(
            standalone=True,
            clusterwide=settings.clusterwide,
            namespaces=list(settings.watch_namespaces),
            settings=kopf_settings,
            identity=settings.identity,
            stop_flag=kopf_stop,
            loop=loop,
            memo=memo,
        )
    finally:
        health.role = "stopping"
        lost = elector is not None and elector.lost.is_set()
        stop.set()
        if elector is not None:
            elector_thread.join(timeout=5)
            if not lost:
                elector.release()
        server.shutdown()
        loop.close()
    if lost:
        log.error("exiting: leadership lost")
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

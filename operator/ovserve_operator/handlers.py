"""kopf's handlers: the process's lifecycle. kopf hosts the process (login, the event loop, startup and cleanup,
its settings: cli.py); the operator's work is the Controller's (controller.py).

The startup handler builds the Controller from what cli.py put into kopf's memo (settings, API client, health
state), keeps it in the memo and starts it; the cleanup handler stops it. kopf watches no resource itself: a
kopf resource handler would make kopf list, queue raw events and keep a record of every object again, which
the Controller's reflectors and caches replace (docs/operator.md, "What runs where").
"""

from __future__ import annotations

from typing import Any

import kopf

from .controller import Controller


@kopf.on.startup()
async def startup(memo: kopf.Memo, **_: Any) -> None:
    memo.controller = Controller(memo.settings, memo.kube, memo.health)
    await memo.controller.start()


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    if (controller := memo.get("controller")) is not None:
        await controller.stop()

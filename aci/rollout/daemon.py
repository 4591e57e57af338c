"""Await a blocking call that may never return, without letting it hold the process hostage.

`asyncio.to_thread` uses the loop's executor, whose threads `asyncio.run` joins at exit: one hanging
tool (an infinite loop, a blocked socket) would then block the whole run forever even after its
timeout fired. A daemon thread per call is abandoned on timeout and dies with the process.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any


async def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    loop = asyncio.get_running_loop()
    fut: asyncio.Future = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if fut.done():  # the caller timed out and moved on
            return
        if ok:
            fut.set_result(value)
        else:
            fut.set_exception(value)

    def work() -> None:
        try:
            result = fn(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001 - handed to the awaiting task, which records it
            ok, value = False, e
        else:
            ok, value = True, result
        try:
            loop.call_soon_threadsafe(settle, ok, value)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass

    threading.Thread(target=work, name=f"aci-{getattr(fn, '__name__', 'call')}", daemon=True).start()
    return await fut

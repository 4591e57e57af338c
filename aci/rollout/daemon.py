"""Await a blocking call that may never return, without letting it hold the process hostage.

`asyncio.to_thread` uses the loop's executor, whose threads `asyncio.run` joins at exit: one hanging
tool (an infinite loop, a blocked socket) would then block the whole run forever even after its
timeout fired. Calls here run on daemon worker threads instead: a worker that never comes back is
abandoned (a new one starts when no other is idle) and dies with the process. Workers are reused, so
a busy rollout does not pay a thread start per tool call.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any


class _Workers:
    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._idle = 0
        self._lock = threading.Lock()

    def submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            spawn = self._idle == 0
            if not spawn:
                self._idle -= 1  # that idle worker will take this job
        self._jobs.put(job)
        if spawn:
            threading.Thread(target=self._work, name="aci-tool-worker", daemon=True).start()

    def _work(self) -> None:
        while True:
            self._jobs.get()()
            with self._lock:
                self._idle += 1


_WORKERS = _Workers()


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

    def job() -> None:
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

    _WORKERS.submit(job)
    return await fut

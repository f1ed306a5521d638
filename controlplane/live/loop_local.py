"""One object per running event loop (an ASGI process runs one; each test may run its own)."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def loop_local(factory: Callable[[], T]) -> Callable[[], T]:
    """A function returning the running loop's object, made by ``factory`` on first use; it goes with
    its loop."""
    objects: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, T] = weakref.WeakKeyDictionary()

    def get() -> T:
        loop = asyncio.get_running_loop()
        found = objects.get(loop)
        if found is None:
            found = objects[loop] = factory()
        return found

    return get

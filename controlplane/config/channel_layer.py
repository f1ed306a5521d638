"""The Channels layer over Redis, with this process's group memberships kept across a Redis restart.

Redis keeps nothing across a restart (it is not the source of truth), and a restarted Redis has forgotten
every group. A socket that stayed open across the restart — an agent link whose channel-layer read is
retried with back-off — would never hear a group message again: its node's command wake-ups, node-state
events and supersede notices went to a group it was no longer in, and its commands waited until the
agent happened to reconnect (a transition's command step then timed out). The layer remembers which of
this process's channels joined which group and, once a read failed on a broken connection, adds them
all again before its next read.
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from channels_redis.core import RedisChannelLayer

log = logging.getLogger(__name__)


class RejoiningRedisChannelLayer(RedisChannelLayer):  # type: ignore[misc]
    """``channels_redis``'s layer that re-adds this process's group memberships after Redis came back."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._groups_of: dict[str, set[str]] = {}
        """channel -> the groups it joined (and has not left) through this layer"""
        self._rejoin = False

    async def group_add(self, group: str, channel: str) -> None:
        await super().group_add(group, channel)
        self._groups_of.setdefault(channel, set()).add(group)

    async def group_discard(self, group: str, channel: str) -> None:
        groups = self._groups_of.get(channel)
        if groups is not None:
            groups.discard(group)
            if not groups:
                del self._groups_of[channel]
        await super().group_discard(group, channel)

    async def receive(self, channel: str) -> Any:
        if self._rejoin:
            await self._rejoin_groups()
        try:
            return await super().receive(channel)
        except (redis.RedisError, OSError):
            self._rejoin = True  # Redis may have restarted and forgotten the groups
            raise

    async def _rejoin_groups(self) -> None:
        """Add every remembered membership again (a set add: a group Redis still has is unchanged)."""
        memberships = [(g, c) for c, groups in list(self._groups_of.items()) for g in sorted(groups)]
        for group, channel in memberships:
            await super().group_add(group, channel)
        self._rejoin = False
        log.info("channel layer back: %d group membership(s) of this process added again", len(memberships))

    async def flush(self) -> None:
        self._groups_of.clear()
        await super().flush()

"""A record logged with the traceback of a lost PostgreSQL or Redis connection is one WARNING line with the
error's words (the web tier's logging configuration, and a Celery worker's or beat's own handlers); any
other error — a deadlock, a bug — keeps its traceback and its level."""

from __future__ import annotations

import io
import logging
import logging.config
import socket
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import redis
from celery.signals import after_setup_logger
from django.conf import settings
from django.db import OperationalError as DjangoOperationalError
from psycopg import errors as pg_errors


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _refused_by_postgresql() -> BaseException:
    """What Django raises while PostgreSQL restarts: its OperationalError from psycopg's."""
    try:
        try:
            psycopg.connect(f"postgresql://postgres@127.0.0.1:{_closed_port()}/x", connect_timeout=2)
        except psycopg.OperationalError as exc:
            raise DjangoOperationalError(*exc.args) from exc
    except DjangoOperationalError as outer:
        return outer
    raise AssertionError("a closed port accepted a connection")


def _refused_by_redis() -> BaseException:
    try:
        redis.Redis(host="127.0.0.1", port=_closed_port(), socket_connect_timeout=2).ping()
    except redis.exceptions.ConnectionError as exc:
        return exc
    raise AssertionError("a closed port accepted a connection")


def _closed_broker_channel() -> BaseException:
    """What beat's publish of a due task raised when Redis restarted twice within 4 s: kombu's Redis channel,
    closed under it, reading its connection's parameters (wrapped by beat in a SchedulingError)."""
    from celery.beat import SchedulingError
    from kombu.transport.redis import Channel

    channel = Channel.__new__(Channel)
    channel.connection = None  # what closing the channel leaves
    try:
        try:
            channel._connparams()
        except AttributeError as exc:
            raise SchedulingError(f"Couldn't apply scheduled task metrics.sample_cluster_waf: {exc}") from exc
    except SchedulingError as outer:
        return outer
    raise AssertionError("a closed channel gave its parameters")


def _deadlock() -> BaseException:
    try:
        try:
            raise pg_errors.DeadlockDetected("deadlock detected")
        except psycopg.OperationalError as exc:
            raise DjangoOperationalError(*exc.args) from exc
    except DjangoOperationalError as outer:
        return outer


def _logged(logger: logging.Logger, exc: BaseException) -> None:
    try:
        raise exc
    except BaseException:
        logger.exception("agent %s: %s could not be stored", "node-1", "worker_report")


@pytest.fixture
def web_log() -> Iterator[io.StringIO]:
    """The web tier's logging configuration, its console writing to a buffer."""
    stream = io.StringIO()
    config: dict[str, Any] = dict(settings.LOGGING)
    config["handlers"] = {"console": dict(config["handlers"]["console"], stream=stream)}
    logging.config.dictConfig(config)
    try:
        yield stream
    finally:
        logging.config.dictConfig(settings.LOGGING)


@pytest.mark.parametrize("outage", [_refused_by_postgresql, _refused_by_redis, _closed_broker_channel])
def test_a_store_outage_is_one_warning_line_on_the_web_tier(web_log: io.StringIO, outage: object) -> None:
    assert callable(outage)
    _logged(logging.getLogger("controlplane.live.agent_link"), outage())
    text = web_log.getvalue()
    assert "Traceback" not in text
    assert text.count("\n") == 1, text
    assert " WARNING controlplane.live.agent_link: agent node-1: worker_report could not be stored" in text
    assert "store unavailable" in text
    assert "connection refused" in text.lower() or "has no attribute 'client'" in text


@pytest.mark.parametrize(
    "error",
    [
        _deadlock,
        lambda: ZeroDivisionError("division by zero"),
        lambda: AttributeError("no attribute 'client'"),
    ],
)
def test_any_other_error_keeps_its_traceback_and_level(web_log: io.StringIO, error: object) -> None:
    assert callable(error)
    _logged(logging.getLogger("controlplane.live.agent_link"), error())
    text = web_log.getvalue()
    assert "Traceback (most recent call last)" in text
    assert " ERROR controlplane.live.agent_link: agent node-1: worker_report could not be stored" in text
    assert "store unavailable" not in text


def test_a_celery_worker_or_beat_logs_a_store_outage_as_one_line() -> None:
    """Celery sets up its own handlers on the root logger; its setup signal puts the filter on them."""
    import controlplane.config.celery  # noqa: F401  (connects the signal)

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("test.celery_root")
    logger.propagate = False
    logger.handlers = [handler]
    try:
        after_setup_logger.send(
            sender=None, logger=logger, loglevel=logging.INFO, logfile=None, format="", colorize=False
        )
        try:
            raise _refused_by_postgresql()
        except DjangoOperationalError:
            logger.exception("Task fleet.check_node_health[1] raised unexpected")
        text = stream.getvalue()
        assert "Traceback" not in text
        assert text.startswith("WARNING test.celery_root: Task fleet.check_node_health[1] raised unexpected")
        assert text.count("\n") == 1, text
    finally:
        logger.handlers = []

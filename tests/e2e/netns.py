"""Real network partitions for end-to-end tests: an agent in its own network namespace, reached over a veth
pair, and a partition that is that link taken down (or a route between two namespaces refused).

Each :class:`Namespace` is ``ip netns`` plus a veth pair: ``<host_if>`` with ``<host_addr>/30`` on the host,
``<ns_if>`` with ``<ns_addr>/30`` inside, a default route via the host. The control plane listens on the
host's loopback; :class:`Forwarder` carries TCP from ``host_addr:port`` to ``127.0.0.1:port`` so an agent in
the namespace reaches it only through its veth link. Taking the link down (:meth:`Namespace.partition`)
drops every packet both ways: sockets stay open and stall, as in a real partition, until the peers' own
timeouts notice. Two namespaces reach each other through the host (IP forwarding, turned on for the host end
of each link only: the global ``ip_forward`` is never written, so concurrent users of this module, e.g. a
test and a bench on one machine, never turn each other's forwarding off when one of them ends);
:func:`refuse_between` cuts that path alone, leaving each one's link to the control plane up.

Only addresses in 10.231.0.0/16 inside namespaces created here (and loopback) are ever used. Needs root
and ``ip`` (iproute2): :func:`available` says whether this machine can.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import socket
import subprocess
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

SUBNET_PREFIX = "10.231"
CLAIM_LOCK = (
    Path("/run/lock/unicron-netns.lock") if Path("/run/lock").is_dir() else Path("/tmp/unicron-netns.lock")
)
"""Held while subnets are chosen and their links made: users started at the same moment (three chaos runs
side by side) would otherwise read the same free /30s and give two agents one address."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=10)


def available() -> str | None:
    """None when namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2's ip is not installed"
    probe = f"ucp-probe-{uuid.uuid4().hex[:6]}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def _used_subnets() -> set[int]:
    out = _ip("-4", "-o", "addr", "show", check=False).stdout
    used = set()
    for word in out.split():
        if word.startswith(SUBNET_PREFIX + "."):
            used.add(int(word.split(".")[2]))
    return used


@dataclass
class Namespace:
    name: str
    index: int
    host_if: str = ""
    ns_if: str = ""
    host_addr: str = ""
    ns_addr: str = ""
    _refusals: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        tag = uuid.uuid4().hex[:5]
        self.host_if, self.ns_if = f"vh{self.index}{tag}", f"vn{self.index}{tag}"
        self.host_addr = f"{SUBNET_PREFIX}.{self.index}.1"
        self.ns_addr = f"{SUBNET_PREFIX}.{self.index}.2"

    def create(self) -> None:
        _ip("netns", "add", self.name)
        _ip("link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if)
        _ip("link", "set", self.ns_if, "netns", self.name)
        _ip("addr", "add", f"{self.host_addr}/30", "dev", self.host_if)
        _ip("link", "set", self.host_if, "up")
        # forward what arrives on this link (to another namespace); gone with the link
        Path(f"/proc/sys/net/ipv4/conf/{self.host_if}/forwarding").write_text("1")
        self.exec_ip("addr", "add", f"{self.ns_addr}/30", "dev", self.ns_if)
        self.exec_ip("link", "set", self.ns_if, "up")
        self.exec_ip("link", "set", "lo", "up")
        self.exec_ip("route", "add", "default", "via", self.host_addr)

    def exec_ip(self, *args: str) -> None:
        _ip("netns", "exec", self.name, "ip", *args)

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` run inside the namespace (``ip netns exec`` execs it: the pid is the command's)."""
        return ["ip", "netns", "exec", self.name, *argv]

    def partition(self) -> None:
        """Take the host end of the link down: nothing crosses either way."""
        _ip("link", "set", self.host_if, "down")

    def heal(self) -> None:
        _ip("link", "set", self.host_if, "up")

    def delete(self) -> None:
        _ip("netns", "del", self.name, check=False)  # takes the veth pair with it
        _ip("link", "del", self.host_if, check=False)


@contextlib.contextmanager
def namespaces(count: int) -> Iterator[list[Namespace]]:
    """``count`` namespaces on unused /30s, forwarding between them on; all removed on exit."""
    made: list[Namespace] = []
    try:
        with CLAIM_LOCK.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when closed: the links made show the /30s as used
            used = _used_subnets()
            free = [i for i in range(1, 250) if i not in used]
            if len(free) < count:
                raise RuntimeError(
                    f"{count} namespaces asked, {len(free)} /30s free in {SUBNET_PREFIX}.0.0/16"
                )
            for i in free[:count]:
                ns = Namespace(f"ucp-{uuid.uuid4().hex[:8]}", i)
                made.append(ns)
                ns.create()
        yield made
    finally:
        for ns in made:
            for src, dst in ns._refusals:
                _ip("rule", "del", "from", src, "to", dst, "prohibit", check=False)
            ns.delete()


def refuse_between(a: Namespace, b: Namespace) -> None:
    """Cut the routed path between two namespaces, both ways (a policy rule on the host); each keeps its
    link to the host."""
    for src, dst in ((a.ns_addr, b.ns_addr), (b.ns_addr, a.ns_addr)):
        _ip("rule", "add", "from", src, "to", dst, "prohibit")
        a._refusals.append((src, dst))


def allow_between(a: Namespace, b: Namespace) -> None:
    for src, dst in list(a._refusals):
        if {src, dst} == {a.ns_addr, b.ns_addr}:
            _ip("rule", "del", "from", src, "to", dst, "prohibit", check=False)
            a._refusals.remove((src, dst))


class Forwarder:
    """TCP from ``listen_addr:port`` to ``127.0.0.1:target_port``, a thread per connection direction."""

    def __init__(self, listen_addr: str, target_port: int) -> None:
        self.target_port = target_port
        self.server = socket.create_server((listen_addr, 0))
        self.port: int = self.server.getsockname()[1]
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True, name=f"forward-{self.port}").start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(src, dst), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self.server.close()
        with self._lock:
            for s in self._sockets:
                with contextlib.suppress(OSError):
                    s.close()

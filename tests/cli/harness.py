"""Runs ``unicron`` as a real subprocess against a live server, with its config file in a test directory."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.processes import spawn

UNICRON = str(Path(sys.executable).with_name("unicron"))
"""The console script the package installs (``.venv/bin/unicron``)."""

SPEC_YAML = """\
# a small GPT that fits one 80 GB device
name: {name}
num_layers: 4
hidden_size: 256
num_attention_heads: 8
seq_length: 512
vocab_size: 32000
global_batch_size: 32
micro_batch_size: 4
max_workers: 8
total_iterations: {total_iterations}
"""


@dataclass
class Cli:
    server: str
    home: Path
    token: str | None = None

    @property
    def config(self) -> Path:
        return self.home / ".config" / "unicron" / "config.json"

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("UNICRON_")}
        env.update(
            HOME=str(self.home),
            UNICRON_CONFIG=str(self.config),
            COLUMNS="220",
            TERM="dumb",
            PYTHONUNBUFFERED="1",
        )
        env.update(extra)
        return env

    def run(
        self, *args: str, input: str | None = None, timeout: float = 120, **env: str
    ) -> subprocess.CompletedProcess[str]:
        """Run ``unicron ARGS``; with a token set and no --server/--token given, as that user."""
        return subprocess.run(
            [UNICRON, *args],
            input=input if input is not None else "",
            capture_output=True,
            text=True,
            env=self.env(**env),
            timeout=timeout,
            check=False,
            start_new_session=True,  # no controlling terminal: a hidden prompt reads standard input
        )

    def as_user(self, *args: str, token: str | None = None, **kw: str) -> subprocess.CompletedProcess[str]:
        token = token or self.token
        assert token, "no token"
        return self.run("--server", self.server, "--token", token, *args, **kw)

    def write_spec(
        self, name: str = "gpt-cli", total_iterations: int = 1000, text: str | None = None
    ) -> Path:
        path = self.home / f"{name}.yaml"
        path.write_text(
            text if text is not None else SPEC_YAML.format(name=name, total_iterations=total_iterations)
        )
        return path


@dataclass
class Background:
    """A ``unicron`` run in the background whose output lines are read as they come."""

    process: subprocess.Popen[bytes]
    lines: queue.Queue[str] = field(default_factory=queue.Queue)
    seen: list[str] = field(default_factory=list)

    @classmethod
    def start(cls, cli: Cli, *args: str) -> Background:
        process = spawn(
            [UNICRON, "--server", cli.server, "--token", cli.token or "", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=cli.env(),
        )
        running = cls(process)
        threading.Thread(target=running._read, daemon=True).start()
        return running

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            self.lines.put(raw.decode(errors="replace").rstrip("\n"))

    def wait_for_line(self, text: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            for line in self.seen:
                if text in line:
                    return line
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(
                    f"no line with {text!r} within {timeout} s; output so far:\n" + self.output
                )
            try:
                self.seen.append(self.lines.get(timeout=min(left, 0.5)))
            except queue.Empty:
                continue

    def wait(self, timeout: float = 60.0) -> int:
        code = self.process.wait(timeout)
        time.sleep(0.1)  # let the reader drain the pipe
        while not self.lines.empty():
            self.seen.append(self.lines.get_nowait())
        return code

    @property
    def output(self) -> str:
        return "\n".join(self.seen)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

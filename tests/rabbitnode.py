"""A RabbitMQ node of a test's own, for what must not touch the machine's broker:
its global settings (here `consumer_timeout`, which RabbitMQ 3.10 has no per-queue
or per-vhost form of) and anything that stops it. Started from the installed
server under a node name, ports, data and cookie of its own; stopped and removed
by the test that made it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support import free_port, unique_name, wait_port

RABBIT_BIN = Path("/usr/lib/rabbitmq/bin")


class RabbitNode:
    def __init__(self, config: dict[str, str]) -> None:
        self.name = f"{unique_name('timertest')}@localhost"
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="rabbit-node-"))
        lines = [f"listeners.tcp.default = 127.0.0.1:{self.port}", "loopback_users.guest = false"]
        lines += [f"{key} = {value}" for key, value in config.items()]
        (self.dir / "rabbitmq.conf").write_text("\n".join(lines) + "\n")
        (self.dir / "enabled_plugins").write_text("[].\n")
        (self.dir / "home").mkdir()
        self.env = {
            **os.environ,
            "HOME": str(self.dir / "home"),  # its own Erlang cookie
            "RABBITMQ_NODENAME": self.name,
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(free_port()),
            "RABBITMQ_CONFIG_FILE": str(self.dir / "rabbitmq.conf"),
            "RABBITMQ_CONF_ENV_FILE": os.devnull,  # not the machine's node name and flags
            "RABBITMQ_MNESIA_BASE": str(self.dir / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.dir / "log"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.dir / "enabled_plugins"),
            "RABBITMQ_PID_FILE": str(self.dir / "pid"),
        }
        self._proc: subprocess.Popen[bytes] | None = None

    @classmethod
    def available(cls) -> bool:
        return (RABBIT_BIN / "rabbitmq-server").exists()

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"

    def start(self, timeout_s: float = 120) -> RabbitNode:
        out = open(self.dir / "server.out", "ab")
        self._proc = subprocess.Popen(
            [str(RABBIT_BIN / "rabbitmq-server")],
            env=self.env,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
        out.close()
        wait_port(self.port, timeout_s)
        return self

    def ctl(self, *args: str) -> str:
        done = subprocess.run(
            [str(RABBIT_BIN / "rabbitmqctl"), "-n", self.name, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        return done.stdout + done.stderr

    def log(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in (self.dir / "log").glob("*.log"))

    def stop(self) -> None:
        if self._proc is not None:
            self.ctl("stop")
            try:
                self._proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self._proc.pid, 9)
                self._proc.wait(10)
            self._proc = None
        time.sleep(0.2)
        shutil.rmtree(self.dir, ignore_errors=True)

"""Starting, driving and stopping a Flower deployment (flwr 1.41) for privreid.

* **SuperLink** (``flower-superlink``): the coordinator; Fleet, Control and Runtime APIs on ``--host/--port``
  (127.0.0.1:8000). It runs each ServerApp via ``flower-superexec`` (``flwr-serverapp``, on ``PATH``), with
  ``--disable-runtime-dependency-installation`` (no internet; privreid is installed).
* **SuperNode** (``flower-supernode --superlink HOST:PORT``): one per site, its Runtime API on ``--port``
  (9094; distinct per SuperNode on one machine); it polls every 3 s and starts one ``flwr-clientapp`` per
  message. ``--node-config`` carries the site's dataset (:mod:`.site`).
* **Runs**: ``flwr run APP_DIR CONNECTION``, APP_DIR a Flower App (``pyproject.toml`` naming privreid's apps,
  the settings in ``[tool.flwr.app.config]``), CONNECTION in ``$FLWR_HOME/config.toml``: :func:`write_app`,
  :func:`write_connection`.

TLS: without ``insecure`` the SuperLink needs ``--ssl-certfile``, ``--ssl-keyfile``, ``--ssl-ca-certfile``;
SuperNodes and ``flwr run`` verify with the CA (``--root-certificates``). Processes start in their own session
and are stopped by process group (:func:`stop`), ending the processes they started.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from privreid.errors import ConfigError
from privreid.flower.messages import FlowerRunError
from privreid.flower.server_app import ServerSettings

#: the venv's console scripts (flower-superlink, flwr, flower-superexec, flwr-serverapp, ...)
BIN_DIR = Path(sys.executable).parent
CONNECTION = "privreid"
SERVER_APP = "privreid.flower.server_app:app"
CLIENT_APP = "privreid.flower.client_app:app"


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def flower_env(flwr_home: Path | None = None) -> dict[str, str]:
    """The environment for Flower's processes: this venv's scripts first on ``PATH``, no telemetry."""
    env = dict(os.environ)
    env["PATH"] = f"{BIN_DIR}{os.pathsep}{env.get('PATH', '')}"
    # no phoning home: telemetry and update checks (privreid's machines may be offline); users may override
    env.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    env.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")
    if flwr_home is not None:
        env["FLWR_HOME"] = str(flwr_home)
    return env


@dataclass
class TLS:
    """Certificates for a real deployment; ``None`` everywhere means insecure (loopback tests only)."""

    certfile: Path | None = None
    keyfile: Path | None = None
    ca_certfile: Path | None = None

    @property
    def insecure(self) -> bool:
        return self.certfile is None and self.keyfile is None and self.ca_certfile is None

    def check_server(self) -> None:
        files = {"--ssl-certfile": self.certfile, "--ssl-keyfile": self.keyfile, "--ssl-ca-certfile": self.ca_certfile}
        missing = [k for k, v in files.items() if v is None]
        if not self.insecure and missing:
            raise ConfigError(f"TLS needs all three certificate files; missing {', '.join(missing)} "
                              "(or pass --insecure for a loopback test)")
        for flag, path in files.items():
            if path is not None and not Path(path).is_file():
                raise ConfigError(f"{flag}: file not found: {path}")
        if not self.insecure:  # Flower's server would fail on them with a traceback after starting
            import ssl

            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            for flags, load in (("--ssl-certfile/--ssl-keyfile", lambda: context.load_cert_chain(self.certfile,
                                                                                                  self.keyfile)),
                                ("--ssl-ca-certfile", lambda: context.load_verify_locations(self.ca_certfile))):
                try:
                    load()
                except ssl.SSLError as exc:
                    raise ConfigError(f"{flags}: not a PEM certificate and its private key "
                                      f"({exc.reason or exc})") from None


def check_port(port: int, option: str = "--port") -> None:
    """Refuse, in one line, a port outside 1-65535 (Flower's own parser would print its usage instead)."""
    if not 1 <= port <= 65535:
        raise ConfigError(f"{option} {port}: a port is a number from 1 to 65535")


def superlink_command(*, host: str = "127.0.0.1", port: int = 8000, tls: TLS | None = None,
                      database: Path | None = None) -> list[str]:
    tls = tls or TLS()
    check_port(port)
    cmd = [str(BIN_DIR / "flower-superlink"), "--host", host, "--port", str(port),
           "--disable-runtime-dependency-installation"]
    if tls.insecure:
        cmd.append("--insecure")
    else:
        tls.check_server()
        cmd += ["--ssl-certfile", str(tls.certfile), "--ssl-keyfile", str(tls.keyfile),
                "--ssl-ca-certfile", str(tls.ca_certfile)]
    if database is not None:
        cmd += ["--database", str(database)]
    return cmd


def node_config_arg(values: dict[str, Any]) -> str:
    """``--node-config`` text: space-separated ``key=value`` with TOML values; strings as TOML literal strings
    (no escapes: Windows paths survive); a string holding both quote kinds is refused (Flower's parser)."""
    parts = []
    for key, value in values.items():
        if value is None:
            continue
        if isinstance(value, str):
            if "'" not in value:
                value = f"'{value}'"
            elif '"' not in value and "\\" not in value:
                value = f'"{value}"'
            else:
                raise ConfigError(f"node config {key}={value!r}: a value cannot hold both ' and \"")
        else:
            value = json.dumps(value)
        parts.append(f"{key}={value}")
    return " ".join(parts)


def supernode_command(superlink: str, node_config: dict[str, Any], *, port: int = 9094, host: str = "127.0.0.1",
                      root_certificates: Path | None = None) -> list[str]:
    check_port(port)
    cmd = [str(BIN_DIR / "flower-supernode"), "--superlink", superlink, "--host", host, "--port", str(port),
           "--node-config", node_config_arg(node_config)]
    if root_certificates is None:
        cmd.append("--insecure")
    else:
        if not Path(root_certificates).is_file():
            raise ConfigError(f"--root-certificates: file not found: {root_certificates}")
        cmd += ["--root-certificates", str(root_certificates)]
    return cmd


def start(cmd: list[str], log_path: Path, *, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start ``cmd`` in a new session (its own process group), output to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env or flower_env(),
                                start_new_session=True)


def stop(proc: subprocess.Popen, timeout: float = 10.0) -> None:
    """End ``proc`` and its process group (SIGTERM, then SIGKILL after ``timeout`` s)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout)
        except ProcessLookupError:
            pass
    try:  # children that outlived the leader (same group id)
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def wait_for_port(host: str, port: int, timeout: float, proc: subprocess.Popen | None = None,
                  log_path: Path | None = None) -> None:
    """Block until something accepts connections on ``host:port``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            tail = log_path.read_text()[-2000:] if log_path and log_path.exists() else ""
            raise FlowerRunError(f"{Path(proc.args[0]).name} exited with status {proc.returncode}:\n{tail}")
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex((host, port)) == 0:
                return
        time.sleep(0.2)
    raise FlowerRunError(f"nothing listens on {host}:{port} after {timeout:g} s")


# ----------------------------------------------------------------------------- submitting runs
def write_app(app_dir: Path, settings: ServerSettings) -> Path:
    """A Flower App directory whose components are privreid's apps and whose run config is ``settings``."""
    app_dir.mkdir(parents=True, exist_ok=True)
    (app_dir / "pyproject.toml").write_text(tomli_w.dumps({
        "project": {"name": "privreid-run", "version": "1.0.0", "license": "MIT", "dependencies": [],
                    "description": "privreid federated ReID training (generated by `privreid flower run`)"},
        "tool": {"flwr": {"app": {"publisher": "privreid",
                                  "components": {"serverapp": SERVER_APP, "clientapp": CLIENT_APP},
                                  "config": settings.to_run_config()}}},
    }))
    return app_dir


def write_connection(flwr_home: Path, address: str, *, root_certificates: Path | None = None) -> Path:
    """``$FLWR_HOME/config.toml`` with one SuperLink connection, :data:`CONNECTION`."""
    connection: dict[str, Any] = {"address": address}
    if root_certificates is None:
        connection["insecure"] = True
    else:
        connection["root-certificates"] = str(Path(root_certificates).resolve())
    flwr_home.mkdir(parents=True, exist_ok=True)
    path = flwr_home / "config.toml"
    path.write_text(tomli_w.dumps({"superlink": {"default": CONNECTION, CONNECTION: connection}}))
    return path


def _flwr(args: list[str], flwr_home: Path, timeout: float = 120) -> dict[str, Any]:
    proc = subprocess.run([str(BIN_DIR / "flwr"), *args, "--format", "json"], capture_output=True, text=True,
                          env=flower_env(flwr_home), timeout=timeout)
    try:
        out = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise FlowerRunError(f"flwr {args[0]} failed: {_one_line(proc.stderr or proc.stdout)[-1000:]}") from None
    if not out.get("success", False):
        raise FlowerRunError(f"flwr {args[0]}: {_one_line(str(out.get('error-message', out)))}")
    return out


def _one_line(text: str) -> str:
    """Flower's multi-line message (an unreachable SuperLink's, a traceback's end) as one line."""
    return " ".join(text.split())


def submit(app_dir: Path, flwr_home: Path) -> int:
    """``flwr run``; the run id."""
    return int(_flwr(["run", str(app_dir), CONNECTION], flwr_home)["run-id"])


def run_status(flwr_home: Path, run_id: int) -> dict[str, Any]:
    """The SuperLink's record of run ``run_id`` (status, status-details, network traffic, compute time)."""
    runs = _flwr(["ls", CONNECTION, "--run-id", str(run_id)], flwr_home)["runs"]
    return runs[0]


def stop_run(flwr_home: Path, run_id: int) -> None:
    subprocess.run([str(BIN_DIR / "flwr"), "stop", str(run_id), CONNECTION], capture_output=True,
                   env=flower_env(flwr_home), timeout=60)


def rounds_done(out_dir: Path) -> int:
    """Rounds whose training records are in ``metrics.jsonl`` so far."""
    path = out_dir / "metrics.jsonl"
    if not path.is_file():
        return 0
    rounds = [json.loads(line).get("round", 0) for line in path.read_text().splitlines() if line.strip()]
    return max(rounds, default=0)


def wait_for_run(flwr_home: Path, run_id: int, *, poll: float = 3.0, timeout: float | None = None,
                 on_poll: Callable[[], None] | None = None) -> dict[str, Any]:
    """Poll until run ``run_id`` finishes; its final record.  Raises :class:`FlowerRunError` unless it completed."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        status = run_status(flwr_home, run_id)
        if str(status["status"]).startswith("finished"):
            break
        if deadline is not None and time.monotonic() > deadline:
            stop_run(flwr_home, run_id)
            raise FlowerRunError(f"run {run_id} did not finish within {timeout:g} s; stopped it")
        if on_poll is not None:
            on_poll()
        time.sleep(poll)
    if status["status"] != "finished:completed":
        details = str(status.get("status-details", "")).replace("ServerApp failed with exception: ", "")
        raise FlowerRunError(f"Flower run {run_id} {status['status'].split(':')[-1]}: {details}")
    return status


def run_on_superlink(settings: ServerSettings, address: str, *, root_certificates: Path | None = None,
                     timeout: float | None = None, on_poll: Callable[[], None] | None = None,
                     poll: float = 3.0) -> dict[str, Any]:
    """Submit one privreid run to the SuperLink at ``address`` and wait for it; the SuperLink's run record."""
    with tempfile.TemporaryDirectory(prefix="privreid-flower-") as tmp:
        home = Path(tmp) / "flwr-home"
        write_connection(home, address, root_certificates=root_certificates)
        run_id = submit(write_app(Path(tmp) / "app", settings), home)
        try:
            return {"run-id": run_id, **wait_for_run(home, run_id, timeout=timeout, on_poll=on_poll, poll=poll)}
        except KeyboardInterrupt:
            stop_run(home, run_id)
            raise


# ----------------------------------------------------------------------------- loopback deployments
@dataclass
class LocalDeployment:
    """A SuperLink and one SuperNode per site on 127.0.0.1 (insecure), for tests and benchmarks. ``sites``: key
    -> ``--node-config`` values (:mod:`.site`); free ports, own process groups, ended by :meth:`close`."""

    sites: dict[str, dict[str, Any]]
    workdir: Path
    superlink_port: int = 0
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    node_ports: dict[str, int] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.superlink_port}"

    def __enter__(self) -> LocalDeployment:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def env(self) -> dict[str, str]:
        return flower_env(self.workdir / "flwr-home")

    def start(self) -> None:
        self.superlink_port = self.superlink_port or free_port()
        log = self.workdir / "superlink.log"
        self.procs["superlink"] = start(superlink_command(port=self.superlink_port, database=None), log, env=self.env)
        wait_for_port("127.0.0.1", self.superlink_port, 60, self.procs["superlink"], log)
        for key in self.sites:
            self.start_site(key)

    def start_site(self, key: str) -> subprocess.Popen:
        """(Re)start the SuperNode of site ``key`` on a fresh port."""
        self.node_ports[key] = free_port()
        proc = start(supernode_command(self.address, self.sites[key], port=self.node_ports[key]),
                     self.workdir / f"supernode-{key}.log", env=self.env)
        self.procs[f"site:{key}"] = proc
        return proc

    def kill_site(self, key: str) -> None:
        """Kill the SuperNode of site ``key`` (and its app processes) at once, as a crash would."""
        proc = self.procs.pop(f"site:{key}")
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)

    def close(self) -> None:
        for name in [n for n in self.procs if n != "superlink"] + ["superlink"]:
            if name in self.procs:
                stop(self.procs.pop(name))

    def log_tails(self, chars: int = 3000) -> str:
        """The end of every process's log (SuperLink, which also carries the ServerApp's output, then each
        SuperNode, which carries its ClientApps'), each under its path: what to read when a run fails."""
        logs = [self.workdir / "superlink.log"] + [self.workdir / f"supernode-{key}.log" for key in self.sites]
        return "\n".join(f"==> {log} (last {chars} characters) <==\n{log.read_text(errors='replace')[-chars:]}"
                         for log in logs if log.is_file())

    def run(self, settings: ServerSettings, *, timeout: float | None = None, poll: float = 1.0,
            on_poll: Callable[[], None] | None = None) -> dict[str, Any]:
        return run_on_superlink(settings, self.address, timeout=timeout, poll=poll, on_poll=on_poll)

"""``airlock up``: the whole system on one machine, on embedded defaults, in one command.

Creates the local state in ``.airlock/`` on first run (signing key, receipt key, SQLite
databases, a seeded devcloud fleet, demo people and service tokens), then starts
devcloud, checkpoint, executor, agent and web app as separate processes on loopback and
supervises them until Ctrl-C. A second run reuses the state.

Each process gets only its own settings in its environment, as in the deployment: the
signing key directory only reaches the checkpoint (with the receipt *public* key set it
verifies outcomes against), the write key and the receipt key only the executor, the
read key and agent token only the agent, nothing secret the web app.
Everything runs with ``AIRLOCK_ENV=dev``: this is a demo on a laptop, never production.

The services die with ``up`` however it ends: SIGINT, SIGTERM and SIGHUP (a closed
terminal) stop them in order, and on Linux each child asks the kernel for a SIGTERM when
``up`` dies (``PR_SET_PDEATHSIG``), so even a SIGKILL leaves no executor holding the
write key and its ports. ``up`` runs with umask 077 and keeps its state directory 0700:
the databases hold password, session and token hashes.

While the system runs, ``up`` keeps the executor's trusted key set equal to the
checkpoint's public key set: ``airlock keys stage|rotate|revoke`` on this state change the
key directory, the running checkpoint signs with the new active key from its next
approval, and ``up`` re-exports the key set (a new file renamed over the old) within half
a second, which the executor reads at its next bundle. No restart; a staged key is
trusted by the executor before ``rotate`` makes it sign.

One ``up`` per state directory: ``up`` holds an exclusive ``flock`` on ``up.lock`` in it
for its whole life, and a second ``up`` on the same state is refused at once, naming the
first (its pid and ports). The kernel drops the lock when its holder dies, so a killed
``up`` leaves nothing to clean: the next one takes the state over. ``up.json`` records
what the running ``up`` serves (its pid, ports and URLs; written atomically, marked
``stopped`` when it ends), and the dev defaults read it (``airlock.settings``), so
``doctor`` and ``config`` find the ports ``up`` was started with.

The state directory is ``--home``, else ``AIRLOCK_UP_HOME``, else ``.airlock``.
``AIRLOCK_HOME`` is the CLI's session directory (``airlock login``); it used to set this
too, and still does, with a warning, where it holds a state ``up`` made, so such a setup
does not silently start over in ``.airlock``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import typer

from ._text import inert

__all__ = ["up_command"]

DEMO_PEOPLE = (("alice", "approver"), ("bob", "approver"), ("admin", "admin"))
_STOP_GRACE_SECONDS = 10.0
#: The Host names up's checkpoint and web app answer to: those of the URLs up gives
#: out (127.0.0.1) and localhost; any other is refused 400 (DNS rebinding).
_UP_HOSTS = "127.0.0.1,localhost"
DEFAULT_HOME = Path(".airlock")
#: What `up` writes first into its state directory; a session directory holds none of it.
_STATE_MARKERS = ("keys", "checkpoint.db", "executor-receipt.pem", "demo-credentials")


#: What stops `up`, at any point: Ctrl-C, a service manager, a closed terminal.
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: Written 0644 on purpose by the key store (services/checkpoint/keys.py): the signing
#: keys' public manifest. Left as it is; the 0700 state directory still closes it off.
_PUBLIC_BY_DESIGN = (Path("keys", "keyset.json"),)
#: prctl(2) option: the signal this process gets when the thread that forked it ends.
_PR_SET_PDEATHSIG = 1


#: The lock one ``up`` holds on its state directory, and what it records there.
LOCK_NAME = "up.lock"
STATE_NAME = "up.json"


class UpError(Exception):
    """Setting up or starting the local system failed; the message says what to do."""


class _StateLock:
    """An exclusive ``flock`` on ``home/up.lock`` for ``up``'s lifetime, and ``up.json``.

    :meth:`take` raises :class:`UpError` naming the holder when another ``up`` has it.
    The descriptor is close-on-exec (PEP 446), so no service ``up`` starts inherits the
    lock and outlives it holding it.
    """

    def __init__(self, home: Path) -> None:
        self.home = home
        self.state = home / STATE_NAME
        self._fd: int | None = None

    def _recorded(self) -> dict[str, object]:
        try:
            value = json.loads(self.state.read_text())
        except (OSError, ValueError):
            return {}
        return value if isinstance(value, dict) else {}

    def take(self) -> str | None:
        """Take the lock; a note when a previous ``up`` ended without stopping."""
        fd = os.open(self.home / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            first = self._recorded()
            ports = first.get("ports")
            served = (
                ", ".join(f"{name} {port}" for name, port in ports.items())
                if isinstance(ports, dict)
                else "ports unknown"
            )
            raise UpError(
                f"another `airlock up` runs on {self.home} (pid {first.get('pid', 'unknown')}; "
                f"{served}): stop it first, or pass another --home"
            ) from None
        self._fd = fd
        before = self._recorded()
        if before.get("status") == "running":
            return (
                f"note: the previous up on {self.home} (pid {before.get('pid')}) ended "
                "without stopping; taking its state over"
            )
        return None

    def record(self, status: str, ports: Mapping[str, int]) -> None:
        """Write ``up.json`` (a new file renamed over the old: never read half-written)."""
        value = {
            "status": status,
            "pid": os.getpid(),
            "ports": dict(ports),
            "checkpoint_url": f"http://127.0.0.1:{ports['checkpoint']}",
            "webapp_url": f"http://127.0.0.1:{ports['webapp']}",
            "devcloud_endpoint": f"127.0.0.1:{ports['devcloud']}",
            "at": int(time.time()),
        }
        tmp = self.state.with_name(f"{STATE_NAME}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(json.dumps(value, sort_keys=True) + "\n")
        tmp.replace(self.state)

    def release(self, ports: Mapping[str, int]) -> None:
        """Mark ``up.json`` stopped, then let the lock go (closing drops the flock)."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            self.record("stopped", ports)
        os.close(self._fd)
        self._fd = None


class _Interrupted(Exception):
    """A stop signal arrived before the system was up; ``signum`` is the signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _echo(text: str, *, err: bool = False) -> None:
    """``typer.echo`` that a closed terminal cannot turn into a crash before the stop."""
    with contextlib.suppress(OSError):  # EIO, EPIPE: after SIGHUP the terminal is gone
        typer.echo(text, err=err)


def _die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` after which the child gets SIGTERM when this process dies, by
    any means (SIGKILL included); None where the kernel offers no such thing (not Linux).

    ``prctl`` is looked up here, in the parent, so the forked child only makes one call.
    """
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    parent = os.getpid()

    def preexec() -> None:
        if prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        # The parent may have died between fork and prctl, which then never fires: the
        # child was re-parented already, so it ends here instead of running orphaned.
        if os.getppid() != parent:
            os._exit(1)

    return preexec


def _private_home(home: Path) -> str | None:
    """Create ``home`` 0700, or make sure an existing one is reachable by its owner only.

    Refused: a directory of someone else, or one others may write to (whoever can write
    in it can swap the key set the executor trusts, or the checkpoint's signing key).
    Tightened to 0700: one that others can only read, when it is empty or holds a state
    ``up`` made (it is ours to keep private); any other such directory is refused
    rather than changed behind its owner's back. Files and directories already in the
    state lose their group and other bits too (a state from before ``up`` set a umask
    has its databases 0644). Returns a note when something was tightened.
    """
    try:
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = home.stat()
    except OSError as exc:
        raise UpError(f"state directory {home}: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise UpError(f"state directory {home} is not a directory")
    fix = f"chmod 700 {home}, or pass another --home"
    if info.st_uid != os.geteuid():
        raise UpError(f"state directory {home} belongs to another user; pass another --home")
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o022:
        raise UpError(
            f"state directory {home} is writable by others (mode {mode:04o}): anyone who can "
            f"write in it can replace the keys the executor trusts; {fix}"
        )
    note = None
    if mode & 0o077:
        ours = any((home / marker).exists() for marker in _STATE_MARKERS)
        if not ours and any(home.iterdir()):
            raise UpError(
                f"state directory {home} is readable by others (mode {mode:04o}) and holds "
                f"files up did not make; {fix}"
            )
        os.chmod(home, 0o700)
        note = f"note: made the state directory {home} private (mode {mode:04o} -> 0700)"
    for root, dirs, files in os.walk(home):
        for name in (*dirs, *files):
            path = Path(root, name)
            entry = path.lstat()
            if stat.S_ISLNK(entry.st_mode) or not stat.S_IMODE(entry.st_mode) & 0o077:
                continue  # a link's target is not ours to change
            if path.relative_to(home) in _PUBLIC_BY_DESIGN:
                continue
            os.chmod(path, stat.S_IMODE(entry.st_mode) & 0o700)
            note = note or f"note: made the files in {home} private to their owner"
    return note


@dataclass
class _Service:
    name: str
    args: list[str]
    env: dict[str, str]
    ready: Callable[[], bool]
    log: Path
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)


def _write_private(path: Path, text: str) -> None:
    """Create ``path`` with mode 0600 from the start (no chmod window), never overwrite."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


def _export_receipt_keys(key: Path, out: Path) -> None:
    """Write the public key set of the executor's receipt key (what the checkpoint trusts)."""
    from airlock.protocol import KeySet, canonical_bytes
    from services.executor import ConfigError, ReceiptSigner

    try:
        signer = ReceiptSigner.from_file(key)
    except (ConfigError, ValueError, OSError) as exc:
        raise UpError(f"executor receipt key {key}: {exc}") from None
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_bytes(canonical_bytes(KeySet([signer.trusted_key()]).to_value()))
    tmp.replace(out)  # atomic: a starting checkpoint never reads half a file


class _TrustedKeysExport:
    """The executor's trusted key file, following the checkpoint's key directory.

    :meth:`sync` looks at the manifest's identity (inode, mtime, size: it is only ever
    replaced by rename) and, when it changed, writes the public key set to the file if it
    differs from what is there (the executor records each key set it takes in its audit
    chain: no rewrite for nothing). A manifest that cannot be read leaves the file as it
    is: the executor keeps trusting what it did, as one that was never re-exported
    would, and the checkpoint, reading the same manifest, signs nothing.
    """

    def __init__(self, keys_dir: Path, out: Path) -> None:
        self.keys_dir = keys_dir
        self.out = out
        self._stamp: tuple[int, int, int] | None = None
        self._said: str | None = None

    def _manifest_stamp(self) -> tuple[int, int, int] | None:
        try:
            st = (self.keys_dir / "keyset.json").stat()
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def sync(self) -> str | None:
        """Export if the key set changed; a line to tell the user, or None. Raises
        UpError when the key set cannot be exported (at start, where that stops up)."""
        from services.checkpoint.errors import ConfigError

        from ._keys import public_keyset_text, replace_file

        # Taken before the read: a change landing during it is seen at the next call.
        stamp = self._manifest_stamp()
        if stamp is not None and stamp == self._stamp:
            return None
        try:
            text = public_keyset_text(self.keys_dir)
            try:
                current: str | None = self.out.read_text()
            except FileNotFoundError:
                current = None
            if current != text:
                replace_file(self.out, text.encode())
        except (ConfigError, OSError, ValueError) as exc:  # ValueError: not UTF-8
            raise UpError(
                f"the checkpoint's public key set could not be exported to {self.out}: {exc}"
            ) from None
        self._stamp = stamp
        self._said = None
        if current is None or current == text:
            return None
        counts = _status_counts(text)
        return (
            f"keys: the checkpoint's key set changed ({counts}); re-exported to {self.out}, "
            "which the executor reads at its next approval"
        )

    def follow(self) -> str | None:
        """:meth:`sync` while up runs: a failure is told once, and tried again."""
        try:
            return self.sync()
        except UpError as exc:
            said = f"up: warning: {exc}; the executor keeps the key set it has"
            if said == self._said:
                return None
            self._said = said
            return said


def _status_counts(text: str) -> str:
    statuses = [str(k["status"]) for k in json.loads(text)["keys"]]
    order = ("active", "next", "retired", "revoked")
    named = {"next": "staged"}
    return ", ".join(f"{statuses.count(s)} {named.get(s, s)}" for s in order if statuses.count(s))


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _http_ok(url: str) -> Callable[[], bool]:
    import httpx

    def check() -> bool:
        try:
            return httpx.get(url, timeout=1.0).status_code == 200
        except httpx.HTTPError:
            return False

    return check


class _Stack:
    def __init__(
        self,
        home: Path,
        ports: dict[str, int],
        instances: int,
        interval: int,
        *,
        devcloud_admin: bool = False,
        grace: int | None = None,
    ) -> None:
        self.home = home
        #: The agent's grace period before a delete, seconds; None keeps its default.
        self.grace = grace
        #: Set by a stop signal; starting gives up at the next step (``_Interrupted``).
        self.stopping = threading.Event()
        self.signum = int(signal.SIGTERM)
        self._preexec = _die_with_parent()
        self.devcloud_admin = devcloud_admin
        self.ports = ports
        self.instances = instances
        self.interval = interval
        self.logs = home / "logs"
        self.checkpoint_url = f"http://127.0.0.1:{ports['checkpoint']}"
        self.devcloud_endpoint = f"127.0.0.1:{ports['devcloud']}"
        self.services: list[_Service] = []
        self.new_credentials: list[tuple[str, str, str]] = []
        self.trusted_keys = _TrustedKeysExport(home / "keys", home / "trusted-keys.json")

    # ------------------------------------------------------------------ environment

    def _env(self, **values: str | Path) -> dict[str, str]:
        # Start from the caller's environment minus every AIRLOCK_* variable, so one
        # service never inherits another's settings from the shell.
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
        env["AIRLOCK_ENV"] = "dev"
        env.update({k: str(v) for k, v in values.items()})
        return env

    def checkpoint_env(self) -> dict[str, str]:
        return self._env(
            AIRLOCK_CHECKPOINT_DATABASE_URL=f"sqlite:///{self.home / 'checkpoint.db'}",
            AIRLOCK_CHECKPOINT_KEYS_DIR=self.home / "keys",
            AIRLOCK_CHECKPOINT_RECEIPT_KEYS_PATH=self.home / "receipt-keys.json",
            AIRLOCK_CHECKPOINT_PORT=str(self.ports["checkpoint"]),
            # The names up's own URLs use (and localhost): any other Host is refused.
            AIRLOCK_CHECKPOINT_ALLOWED_HOSTS=_UP_HOSTS,
            # The web app calls from 127.0.0.1 and names each browser in X-Forwarded-For,
            # so that sign-ins are slowed per browser, not for everyone at once.
            AIRLOCK_CHECKPOINT_TRUSTED_PROXIES="127.0.0.1",
        )

    def executor_env(self, token: str = "") -> dict[str, str]:
        return self._env(
            AIRLOCK_EXECUTOR_DATABASE_URL=f"sqlite:///{self.home / 'executor.db'}",
            AIRLOCK_EXECUTOR_TRUSTED_KEYS_PATH=self.home / "trusted-keys.json",
            AIRLOCK_EXECUTOR_RECEIPT_KEY_PATH=self.home / "executor-receipt.pem",
            AIRLOCK_EXECUTOR_CLOUD_ENDPOINT=self.devcloud_endpoint,
            AIRLOCK_EXECUTOR_CLOUD_PROTOCOL="http",
            AIRLOCK_EXECUTOR_CHECKPOINT_URL=self.checkpoint_url,
            AIRLOCK_EXECUTOR_CHECKPOINT_TOKEN=token,
            AIRLOCK_EXECUTOR_HEARTBEAT_PATH=self.home / "executor.heartbeat",
        )

    def agent_env(self, token: str) -> dict[str, str]:
        grace = {} if self.grace is None else {"AIRLOCK_AGENT_GRACE_SECONDS": str(self.grace)}
        return self._env(
            AIRLOCK_AGENT_CLOUD_ENDPOINT=self.devcloud_endpoint,
            AIRLOCK_AGENT_CLOUD_PROTOCOL="http",
            AIRLOCK_AGENT_CHECKPOINT_URL=self.checkpoint_url,
            AIRLOCK_AGENT_CHECKPOINT_TOKEN=token,
            **grace,
        )

    def devcloud_env(self) -> dict[str, str]:
        env = self._env(AIRLOCK_DEVCLOUD_DB_PATH=self.home / "devcloud.db")
        token = self.home / "devcloud-admin-token"
        if self.devcloud_admin and token.exists():
            env["AIRLOCK_DEVCLOUD_ENABLE_ADMIN"] = "true"
            env["AIRLOCK_DEVCLOUD_ADMIN_TOKEN"] = token.read_text().strip()
        return env

    def webapp_env(self) -> dict[str, str]:
        return self._env(
            AIRLOCK_WEBAPP_CHECKPOINT_URL=self.checkpoint_url,
            AIRLOCK_WEBAPP_ALLOWED_HOSTS=_UP_HOSTS,
        )

    # ------------------------------------------------------------------ first-run state

    def check_stop(self) -> None:
        if self.stopping.is_set():
            raise _Interrupted(self.signum)

    def _airlock(self, args: list[str], env: dict[str, str], *, first: bool = True) -> str:
        """Run one setup command to its end; a stop signal is heeded before it, never
        during it (``first=False``: nor before it, inside a step of several commands),
        so a step is done whole or not at all: a demo person created but a password lost
        to Ctrl-C would make every later run fail on that name."""
        if first:
            self.check_stop()
        result = subprocess.run(  # noqa: S603 - our own interpreter, fixed argv, no shell
            [sys.executable, "-m", "airlock.cli", *args],
            env=env,
            capture_output=True,
            text=True,
            check=False,
            start_new_session=True,  # Ctrl-C goes to `up` alone, which waits for the step
            preexec_fn=self._preexec,  # one prctl call: see _die_with_parent
        )
        if result.returncode != 0:
            stderr = "\n".join(map(inert, result.stderr.strip().splitlines()))
            raise UpError(f"`airlock {' '.join(args[:2])}` failed:\n{stderr}")
        return result.stdout

    def prepare(self, echo: Callable[[str], None]) -> None:
        """Create whatever part of the local state is missing; reuse the rest."""
        note = _private_home(self.home)
        if note is not None:
            echo(note)
        self.logs.mkdir(mode=0o700, exist_ok=True)
        keys_dir = self.home / "keys"
        if not keys_dir.exists() or not any(keys_dir.iterdir()):
            echo("generating the checkpoint's Ed25519 signing key")
            self._airlock(["keys", "generate", "--keys-dir", str(keys_dir)], self.checkpoint_env())
        # Exported every start, so a key change made while up was not running reaches
        # the executor; while it runs, _run follows every change (trusted_keys.follow).
        self.check_stop()
        self.trusted_keys.sync()
        receipt_key = self.home / "executor-receipt.pem"
        if not receipt_key.exists():
            echo("generating the executor's receipt key")
            self._airlock(
                ["executor", "keygen", "--out", str(receipt_key)],
                self.executor_env(),
            )
        # The checkpoint refuses to start without the receipt public key set: derive it
        # from the executor's key every start, so it can never be missing or stale.
        _export_receipt_keys(receipt_key, self.home / "receipt-keys.json")
        credentials = self.home / "demo-credentials"
        if not credentials.exists():
            echo("creating demo people: alice and bob (approvers), admin")
            lines = []
            for i, (name, role) in enumerate(DEMO_PEOPLE):
                out = self._airlock(
                    ["users", "add", name, "--role", role, "--generate"],
                    self.checkpoint_env(),
                    first=i == 0,
                )
                password = out.rsplit("password:", 1)[1].strip()
                lines.append(f"{name} {role} {password}\n")
                self.new_credentials.append((name, role, password))
            _write_private(credentials, "".join(lines))
        tokens = self.home / "service-tokens.json"
        if not tokens.exists():
            echo("creating the agent's and the executor's service tokens")
            value = {
                role: self._airlock(
                    ["tokens", "create", f"{role}-local", "--role", role],
                    self.checkpoint_env(),
                    first=role == "agent",
                ).strip()
                for role in ("agent", "executor")
            }
            _write_private(tokens, json.dumps(value))
        admin_token = self.home / "devcloud-admin-token"
        if self.devcloud_admin and not admin_token.exists():
            _write_private(admin_token, secrets.token_urlsafe(24))
        if not (self.home / "devcloud.db").exists():
            echo(f"seeding devcloud with a fleet of {self.instances} instances")
            self._airlock(
                ["devcloud", "seed", "--instances", str(self.instances)], self.devcloud_env()
            )

    def tokens(self) -> dict[str, str]:
        value = json.loads((self.home / "service-tokens.json").read_text())
        return {str(k): str(v) for k, v in value.items()}

    # ------------------------------------------------------------------ processes

    def plan(self) -> None:
        tokens = self.tokens()
        heartbeat = self.home / "executor.heartbeat"
        with contextlib.suppress(FileNotFoundError):
            heartbeat.unlink()  # a stale one must not count as this run's

        def executor_ready() -> bool:
            return heartbeat.exists()

        def alive() -> bool:
            return True

        p = self.ports
        self.services = [
            _Service(
                "devcloud",
                ["devcloud", "serve", "--port", str(p["devcloud"])],
                self.devcloud_env(),
                _http_ok(f"http://{self.devcloud_endpoint}/_health"),
                self.logs / "devcloud.log",
            ),
            _Service(
                "checkpoint",
                ["checkpoint", "--port", str(p["checkpoint"])],
                self.checkpoint_env(),
                _http_ok(f"{self.checkpoint_url}/readyz"),
                self.logs / "checkpoint.log",
            ),
            _Service(
                "executor",
                ["executor"],
                self.executor_env(tokens["executor"]),
                executor_ready,
                self.logs / "executor.log",
            ),
            _Service(
                "webapp",
                ["webapp", "--port", str(p["webapp"])],
                self.webapp_env(),
                _http_ok(f"http://127.0.0.1:{p['webapp']}/healthz"),
                self.logs / "webapp.log",
            ),
            _Service(
                "agent",
                ["agent", "--loop", "--interval", str(self.interval)],
                self.agent_env(tokens["agent"]),
                alive,
                self.logs / "agent.log",
            ),
        ]

    def start(self, timeout: float, echo: Callable[[str], None]) -> None:
        for service in self.services:
            self.check_stop()
            log = open(service.log, "ab")  # noqa: SIM115 - owned by the child for its life
            try:
                service.proc = subprocess.Popen(  # noqa: S603 - our interpreter, fixed argv
                    [sys.executable, "-m", "airlock.cli", *service.args],
                    env=service.env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    # Own process group: Ctrl-C reaches only `airlock up`, which then stops
                    # the services in order; the death signal covers `up` dying any other way.
                    start_new_session=True,
                    preexec_fn=self._preexec,  # noqa: PLW1509 - up forks from its only thread
                )
            except (OSError, subprocess.SubprocessError) as exc:
                raise UpError(f"{service.name} could not be started: {exc}") from None
            finally:
                log.close()
            deadline = time.monotonic() + timeout
            while not service.ready():
                self.check_stop()
                if service.proc.poll() is not None:
                    raise UpError(f"{service.name} exited at start:\n{self.tail(service)}")
                if time.monotonic() > deadline:
                    raise UpError(
                        f"{service.name} not ready after {timeout:.0f}s:\n{self.tail(service)}"
                    )
                self.stopping.wait(0.2)
            echo(f"  {service.name:<10} pid {service.proc.pid:<7} log {service.log}")

    def tail(self, service: _Service, lines: int = 20) -> str:
        try:
            text = service.log.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        # A service's log quotes the cloud's and the checkpoint's answers: escaped.
        return "\n".join(f"    {inert(line)}" for line in text[-lines:])

    def death_signal_missing(self) -> bool:
        return self._preexec is None

    def first_dead(self) -> _Service | None:
        for service in self.services:
            if service.proc is not None and service.proc.poll() is not None:
                return service
        return None

    def stop(self) -> None:
        """SIGTERM in reverse start order; SIGKILL whatever outlives the grace period."""
        for service in reversed(self.services):
            if service.proc is not None and service.proc.poll() is None:
                service.proc.send_signal(signal.SIGTERM)
                try:
                    service.proc.wait(_STOP_GRACE_SECONDS)
                except subprocess.TimeoutExpired:
                    service.proc.kill()
                    service.proc.wait()


def cli_hint(environ: Mapping[str, str], prefix: Path = Path(sys.prefix)) -> str:
    """What to type before ``airlock …`` in another terminal: nothing when ``airlock`` on
    that PATH is this one, else the line that puts it there (``make up`` installs it into
    the checkout's ``.venv``, which a new shell does not have on PATH)."""
    own = prefix / "bin" / "airlock"
    found = shutil.which("airlock", path=environ.get("PATH", ""))
    if found is not None and Path(found).resolve() == own.resolve():
        return ""
    activate = prefix / "bin" / "activate"
    if activate.is_file():
        return f". {shlex.quote(str(activate))}, then "
    return f"put {shlex.quote(str(own.parent))} on PATH, then "


def _admin_hint(home: Path) -> str:
    """Where admin commands find this state: the dev defaults are relative ``.airlock/…``."""
    head = (
        "Admin commands on this state (users, keys, tokens, doctor, executor resolve) need "
        "AIRLOCK_ENV=dev"
    )
    if home.name != DEFAULT_HOME.name:
        return (
            f"{head} and their AIRLOCK_CHECKPOINT_* / AIRLOCK_EXECUTOR_* paths set into\n"
            f"{home} (the dev defaults name .airlock/)."
        )
    where = "this directory" if home.parent == Path.cwd() else str(home.parent)
    return f"{head} in\n{where}."


def state_home(home: Path | None, environ: Mapping[str, str]) -> tuple[Path, str | None]:
    """The state directory, and a note for the user when AIRLOCK_HOME was read or left.

    ``home`` is ``--home`` (or ``AIRLOCK_UP_HOME``, which typer reads into it).
    """
    if home is not None:
        return home, None
    legacy = environ.get("AIRLOCK_HOME")
    if not legacy:
        return DEFAULT_HOME, None
    if any((Path(legacy) / marker).exists() for marker in _STATE_MARKERS):
        return Path(legacy), (
            f"warning: using the state in AIRLOCK_HOME ({legacy}); AIRLOCK_HOME is the "
            "session directory of `airlock login` and will stop naming up's state: set "
            "AIRLOCK_UP_HOME (or pass --home) instead"
        )
    return DEFAULT_HOME, (
        f"note: AIRLOCK_HOME ({legacy}) is the session directory of `airlock login`, not "
        f"up's state; the state is in {DEFAULT_HOME} (--home or AIRLOCK_UP_HOME to move it)"
    )


def up_command(
    *,
    home: Annotated[
        Path | None,
        typer.Option(
            envvar="AIRLOCK_UP_HOME",
            metavar="DIR",
            help="State directory (keys, databases, logs); default .airlock. "
            "Not AIRLOCK_HOME, which is the session directory of `airlock login`.",
        ),
    ] = None,
    webapp_port: Annotated[int, typer.Option(metavar="PORT", help="Web app port.")] = 3000,
    checkpoint_port: Annotated[
        int, typer.Option(metavar="PORT", help="Checkpoint API port.")
    ] = 8787,
    devcloud_port: Annotated[int, typer.Option(metavar="PORT", help="devcloud port.")] = 8788,
    instances: Annotated[
        int, typer.Option(metavar="N", help="Size of the seeded devcloud fleet.")
    ] = 120,
    agent_interval: Annotated[
        int, typer.Option(metavar="SECONDS", help="Seconds between agent scans.")
    ] = 60,
    agent_grace: Annotated[
        int | None,
        typer.Option(
            metavar="SECONDS",
            min=0,
            help="How long an instance Airlock stopped must stay stopped before the agent "
            "proposes its delete (default 7 days; 120 shows a delete within minutes).",
        ),
    ] = None,
    devcloud_admin: Annotated[
        bool,
        typer.Option(
            "--devcloud-admin",
            help="Enable devcloud's test-only admin API (write log, faults); its token is "
            "saved to devcloud-admin-token in the state directory.",
        ),
    ] = False,
    ready_timeout: Annotated[
        float, typer.Option(metavar="SECONDS", help="Seconds each service may take to start.")
    ] = 60.0,
) -> None:
    """Run the whole system locally: devcloud, checkpoint, executor, agent, web app.

    The first run creates the state directory (.airlock, or --home DIR, or $AIRLOCK_UP_HOME).

    It holds the keys, the SQLite databases, a seeded devcloud fleet and the logs.

    The demo people alice, bob and admin get passwords, printed once, saved in it 0600.

    Later runs reuse the state. Ctrl-C, SIGTERM or a closed terminal stops everything.

    On Linux the services die with up even if it is killed (SIGKILL).

    Exit 0 when stopped once up; 128 + the signal (130: Ctrl-C) when stopped starting.

    Exit 1 when a service fails; 2 for usage, a port in use, or another up on the state.

    One up per state directory: a second is refused, naming the first (pid, ports).

    The running up records its ports in up.json there; AIRLOCK_ENV=dev defaults read it.

    While it runs, keys stage, rotate and revoke reach the executor: up re-exports the key set.

    Files are 0600 (umask 077). A state directory others can write to is refused.

    One others can read is made 0700 if it is empty or holds up's state, else refused.

    """
    ports = {"webapp": webapp_port, "checkpoint": checkpoint_port, "devcloud": devcloud_port}
    state, note = state_home(home, os.environ)
    if note is not None:
        typer.echo(note, err=True)
    # The state is made private before anything is written into it (the lock first).
    lock = _StateLock(state.resolve())
    try:
        private = _private_home(lock.home)
    except UpError as exc:
        typer.echo(f"up: {exc}", err=True)
        raise typer.Exit(1) from None
    if private is not None:
        _echo(private)
    try:
        took_over = lock.take()
    except UpError as exc:
        typer.echo(f"up: {exc}", err=True)
        raise typer.Exit(2) from None
    if took_over is not None:
        _echo(took_over, err=True)
    try:
        _up_locked(
            state,
            ports,
            lock,
            instances=instances,
            agent_interval=agent_interval,
            devcloud_admin=devcloud_admin,
            agent_grace=agent_grace,
            ready_timeout=ready_timeout,
            webapp_port=webapp_port,
        )
    finally:
        lock.release(ports)


def _up_locked(
    state: Path,
    ports: dict[str, int],
    lock: _StateLock,
    *,
    instances: int,
    agent_interval: int,
    devcloud_admin: bool,
    agent_grace: int | None,
    ready_timeout: float,
    webapp_port: int,
) -> None:
    """``up`` once it holds its state's lock."""
    taken = [f"{name} ({port})" for name, port in ports.items() if not _port_free(port)]
    if taken:
        typer.echo(
            f"up: port in use: {', '.join(taken)}; stop what uses it or pass "
            "--webapp-port/--checkpoint-port/--devcloud-port",
            err=True,
        )
        raise typer.Exit(2)
    lock.record("running", ports)
    stack = _Stack(
        state.resolve(),
        ports,
        instances,
        agent_interval,
        devcloud_admin=devcloud_admin,
        grace=agent_grace,
    )

    def on_signal(signum: int, _frame: object) -> None:
        stack.signum = signum
        stack.stopping.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in _STOP_SIGNALS}
    # The databases hold password, session and token hashes: every file `up` and its
    # services create (SQLite's -wal and -shm included) is 0600. Put back at the end,
    # for a caller that runs this in its own process (the tests).
    umask = os.umask(0o077)
    try:
        _run(stack, ready_timeout, webapp_port)
    finally:
        stack.stop()  # whatever ended the run, no service outlives it
        os.umask(umask)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _run(stack: _Stack, ready_timeout: float, webapp_port: int) -> None:
    if stack.death_signal_missing():
        _echo(
            "note: this system cannot tie the services' lives to up's (no prctl): if up is "
            "killed (SIGKILL), stop them yourself",
            err=True,
        )
    try:
        stack.prepare(_echo)
        stack.plan()
        _echo("starting services:")
        stack.start(ready_timeout, _echo)
    except _Interrupted as exc:
        # Stopped before the system was up: what started is stopped, and the exit code
        # says which signal it was (128 + its number, as a shell reports it).
        _echo("stopping...")
        stack.stop()
        _echo("stopped")
        raise typer.Exit(128 + exc.signum) from None
    except UpError as exc:
        stack.stop()
        _echo(f"up: {exc}", err=True)
        raise typer.Exit(1) from None

    _echo("")
    _echo(f"Airlock is running: open http://127.0.0.1:{webapp_port}")
    if stack.new_credentials:
        _echo("Demo people (passwords shown once; also saved, mode 0600, in")
        _echo(f"{stack.home / 'demo-credentials'}):")
        for name, role, password in stack.new_credentials:
            _echo(f"  {name:<6} {role:<9} {password}")
    else:
        _echo(f"Demo people and passwords: {stack.home / 'demo-credentials'}")
    _echo(
        "Next: sign in as alice, open a pending proposal from the agent (the first scan\n"
        "lands within a minute), check the evidence and approve it; the executor carries\n"
        "it out and the page shows the outcome with its signed receipt. A delete needs\n"
        f"alice and bob. From another terminal: {cli_hint(os.environ)}airlock login --url "
        f"{stack.checkpoint_url}, then airlock approvals list.\n"
        f"{_admin_hint(stack.home)} Ctrl-C stops everything."
    )
    while not stack.stopping.wait(0.5):
        # keys stage|rotate|revoke on this state: the executor must be given the key set.
        said = stack.trusted_keys.follow()
        if said is not None:
            _echo(said, err=said.startswith("up:"))
        dead = stack.first_dead()
        if dead is not None:
            _echo(f"up: {dead.name} exited unexpectedly:\n{stack.tail(dead)}", err=True)
            stack.stop()
            raise typer.Exit(1)
    _echo("stopping...")
    stack.stop()
    _echo("stopped")

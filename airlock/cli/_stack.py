"""The processes and first-run state behind ``airlock up``.

:class:`Stack` creates what is missing of the local state (keys, databases, demo people,
service tokens, a seeded devcloud fleet), gives each service only its own settings,
starts the services in order, and stops them in reverse. :class:`TrustedKeysExport` keeps
the executor's trusted key set equal to the checkpoint's public key set.
:func:`private_home` keeps the state directory 0700. The command, its state lock and its
output are in :mod:`airlock.cli._up`.

Nothing here runs with a shell, and no service inherits another's ``AIRLOCK_*`` settings.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ._stack_aws import AwsMoto, Cloud
from ._text import inert

__all__ = [
    "DEMO_PEOPLE",
    "STATE_MARKERS",
    "Interrupted",
    "Service",
    "Stack",
    "TrustedKeysExport",
    "UpError",
    "port_free",
    "private_home",
]


class UpError(Exception):
    """Setting up or starting the local system failed; the message says what to do."""


class Interrupted(Exception):
    """A stop signal arrived before the system was up; ``signum`` is the signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


DEMO_PEOPLE = (("alice", "approver"), ("bob", "approver"), ("admin", "admin"))
_STOP_GRACE_SECONDS = 10.0
#: The Host names up's checkpoint and web app answer to: those of the URLs up gives
#: out (127.0.0.1) and localhost; any other is refused 400 (DNS rebinding).
_UP_HOSTS = "127.0.0.1,localhost"
#: What `up` writes first into its state directory; a session directory holds none of it.
STATE_MARKERS = ("keys", "checkpoint.db", "executor-receipt.pem", "demo-credentials")


#: Written 0644 on purpose by the key store (services/checkpoint/keys.py): the signing
#: keys' public manifest. Left as it is; the 0700 state directory still closes it off.
_PUBLIC_BY_DESIGN = (Path("keys", "keyset.json"),)
#: prctl(2) option: the signal this process gets when the thread that forked it ends.
_PR_SET_PDEATHSIG = 1


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


def private_home(home: Path) -> str | None:
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
        ours = any((home / marker).exists() for marker in STATE_MARKERS)
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
class Service:
    """One service process ``up`` runs: its command, environment, readiness and log."""

    name: str
    args: list[str]
    env: dict[str, str]
    ready: Callable[[], bool]
    log: Path
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    #: The module run with ``python -m``: the CLI, or the dev stack's AWS double.
    module: str = "airlock.cli"


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


class TrustedKeysExport:
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


def port_free(port: int) -> bool:
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


class Stack:
    """The five services of one state directory: its first-run state, each service's
    environment, and their processes (started in order, stopped in reverse)."""

    def __init__(
        self,
        home: Path,
        ports: dict[str, int],
        instances: int,
        interval: int,
        *,
        devcloud_admin: bool = False,
        grace: int | None = None,
        cloud: Cloud = "devcloud",
    ) -> None:
        self.home = home
        #: The cloud double the services talk to (``_stack_aws`` for ``aws-moto``).
        self.aws = AwsMoto(home, ports["devcloud"], instances) if cloud == "aws-moto" else None
        #: The agent's grace period before a delete, seconds; None keeps its default.
        self.grace = grace
        #: Set by a stop signal; starting gives up at the next step (``Interrupted``).
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
        self.services: list[Service] = []
        self.new_credentials: list[tuple[str, str, str]] = []
        self.trusted_keys = TrustedKeysExport(home / "keys", home / "trusted-keys.json")

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
            # Gates register their receipt keys here (airlock gate keys init --register);
            # read again when it changes, so a gate set up while up runs is heard.
            AIRLOCK_CHECKPOINT_GATE_KEYS=self.home / "gate-keys.json",
            AIRLOCK_CHECKPOINT_PORT=str(self.ports["checkpoint"]),
            # The names up's own URLs use (and localhost): any other Host is refused.
            AIRLOCK_CHECKPOINT_ALLOWED_HOSTS=_UP_HOSTS,
            # The web app calls from 127.0.0.1 and names each browser in X-Forwarded-For,
            # so that sign-ins are slowed per browser, not for everyone at once.
            AIRLOCK_CHECKPOINT_TRUSTED_PROXIES="127.0.0.1",
        )

    def executor_env(self, token: str = "") -> dict[str, str]:
        if self.aws is not None:
            return self._env(
                AIRLOCK_EXECUTOR_DATABASE_URL=f"sqlite:///{self.home / 'executor.db'}",
                AIRLOCK_EXECUTOR_TRUSTED_KEYS_PATH=self.home / "trusted-keys.json",
                AIRLOCK_EXECUTOR_RECEIPT_KEY_PATH=self.home / "executor-receipt.pem",
                AIRLOCK_EXECUTOR_CHECKPOINT_URL=self.checkpoint_url,
                AIRLOCK_EXECUTOR_CHECKPOINT_TOKEN=token,
                AIRLOCK_EXECUTOR_HEARTBEAT_PATH=self.home / "executor.heartbeat",
                **self.aws.executor_env(),
            )
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
        if self.aws is not None:
            return self._env(
                AIRLOCK_AGENT_CHECKPOINT_URL=self.checkpoint_url,
                AIRLOCK_AGENT_CHECKPOINT_TOKEN=token,
                **self.aws.agent_env(),
                **grace,
            )
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
            raise Interrupted(self.signum)

    def _airlock(self, steps: list[tuple[list[str], dict[str, str]]]) -> list[str]:
        """Run setup commands to their end in one child process (:mod:`._steps`): what
        each printed. A stop signal is heeded before them, never during them, so the
        setup is done whole or not at all: a demo person created but a password lost to
        Ctrl-C would make every later run fail on that name."""
        self.check_stop()
        result = subprocess.run(
            [sys.executable, "-m", "airlock.cli._steps"],
            input=json.dumps([{"args": args, "env": env} for args, env in steps]),
            capture_output=True,
            text=True,
            check=False,
            start_new_session=True,  # Ctrl-C goes to `up` alone, which waits for the step
            preexec_fn=self._preexec,  # one prctl call: see _die_with_parent
        )
        if result.returncode == 0:
            return [str(out) for out in json.loads(result.stdout)]
        try:
            failure = json.loads(result.stdout)
            args, stderr = steps[failure["failed"]][0], str(failure["stderr"])
        except (ValueError, LookupError, TypeError):  # the child itself died
            args, stderr = ["setup"], result.stderr
        stderr = "\n".join(map(inert, stderr.strip().splitlines()))
        raise UpError(f"`airlock {' '.join(args[:2])}` failed:\n{stderr}")

    def prepare(self, echo: Callable[[str], None]) -> None:
        """Create whatever part of the local state is missing; reuse the rest.

        Every missing part is made by one batch of setup commands in one child process
        (one interpreter start, not one a command), and its files written after it."""
        note = private_home(self.home)
        if note is not None:
            echo(note)
        self.logs.mkdir(mode=0o700, exist_ok=True)
        admin_token = self.home / "devcloud-admin-token"
        if self.devcloud_admin and not admin_token.exists():
            _write_private(admin_token, secrets.token_urlsafe(24))
        steps: list[tuple[list[str], dict[str, str]]] = []
        keys_dir = self.home / "keys"
        if not keys_dir.exists() or not any(keys_dir.iterdir()):
            echo("generating the checkpoint's Ed25519 signing key")
            steps.append((["keys", "generate", "--keys-dir", str(keys_dir)], self.checkpoint_env()))
        receipt_key = self.home / "executor-receipt.pem"
        if not receipt_key.exists():
            echo("generating the executor's receipt key")
            steps.append((["executor", "keygen", "--out", str(receipt_key)], self.executor_env()))
        credentials = self.home / "demo-credentials"
        people = [] if credentials.exists() else list(DEMO_PEOPLE)
        at_people = len(steps)
        if people:
            echo("creating demo people: alice and bob (approvers), admin")
            for name, role in people:
                args = ["users", "add", name, "--role", role, "--generate"]
                steps.append((args, self.checkpoint_env()))
        tokens = self.home / "service-tokens.json"
        roles = [] if tokens.exists() else ["agent", "executor"]
        at_roles = len(steps)
        if roles:
            echo("creating the agent's and the executor's service tokens")
            for role in roles:
                args = ["tokens", "create", f"{role}-local", "--role", role]
                steps.append((args, self.checkpoint_env()))
        seed = self.aws is None and not (self.home / "devcloud.db").exists()
        if seed:
            echo(f"seeding devcloud with a fleet of {self.instances} instances")
            args = ["devcloud", "seed", "--instances", str(self.instances)]
            steps.append((args, self.devcloud_env()))
        outputs = self._airlock(steps) if steps else []
        if people:
            lines = []
            for (name, role), out in zip(people, outputs[at_people:], strict=False):
                password = out.rsplit("password:", 1)[1].strip()
                lines.append(f"{name} {role} {password}\n")
                self.new_credentials.append((name, role, password))
            _write_private(credentials, "".join(lines))
        if roles:
            made = zip(roles, outputs[at_roles:], strict=False)
            _write_private(tokens, json.dumps({role: out.strip() for role, out in made}))
        # Exported every start, so a key change made while up was not running reaches
        # the executor; while it runs, _run follows every change (trusted_keys.follow).
        self.check_stop()
        self.trusted_keys.sync()
        # The checkpoint refuses to start without the receipt public key set: derive it
        # from the executor's key every start, so it can never be missing or stale.
        _export_receipt_keys(receipt_key, self.home / "receipt-keys.json")
        gate_keys = self.home / "gate-keys.json"
        if not gate_keys.exists():
            _write_private(gate_keys, "{}")  # no gate yet; named, the file must exist
        if self.aws is not None:
            self.aws.check()  # moto seeds its fleet each time it starts

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
        cloud = Service(
            "devcloud",
            ["devcloud", "serve", "--port", str(p["devcloud"])],
            self.devcloud_env(),
            _http_ok(f"http://{self.devcloud_endpoint}/_health"),
            self.logs / "devcloud.log",
        )
        if self.aws is not None:
            env = self._env(PYTHONPATH=self.aws.checkout)
            cloud = Service("moto", self.aws.args(), env, self.aws.ready, self.logs / "moto.log")
            cloud.module = self.aws.module
        self.services = [
            cloud,
            Service(
                "checkpoint",
                ["checkpoint", "--port", str(p["checkpoint"])],
                self.checkpoint_env(),
                _http_ok(f"{self.checkpoint_url}/readyz"),
                self.logs / "checkpoint.log",
            ),
            Service(
                "executor",
                ["executor"],
                self.executor_env(tokens["executor"]),
                executor_ready,
                self.logs / "executor.log",
            ),
            Service(
                "webapp",
                ["webapp", "--port", str(p["webapp"])],
                self.webapp_env(),
                _http_ok(f"http://127.0.0.1:{p['webapp']}/healthz"),
                self.logs / "webapp.log",
            ),
            Service(
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
                    [sys.executable, "-m", service.module, *service.args],
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

    def tail(self, service: Service, lines: int = 20) -> str:
        try:
            text = service.log.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        # A service's log quotes the cloud's and the checkpoint's answers: escaped.
        return "\n".join(f"    {inert(line)}" for line in text[-lines:])

    def death_signal_missing(self) -> bool:
        return self._preexec is None

    def first_dead(self) -> Service | None:
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

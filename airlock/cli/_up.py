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
``AIRLOCK_HOME`` is the CLI's session directory (``airlock login``); where it holds a
state ``up`` made, ``up`` uses that state, with a warning, so such a setup does not
silently start over in ``.airlock``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import shutil
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated

import typer

from ._stack import STATE_MARKERS, Interrupted, Stack, UpError, port_free, private_home
from ._stack_aws import Cloud, CloudChoice

__all__ = ["admin_hint", "cli_hint", "state_home", "up_command"]

DEFAULT_HOME = Path(".airlock")
#: What stops `up`, at any point: Ctrl-C, a service manager, a closed terminal.
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


#: The lock one ``up`` holds on its state directory, and what it records there.
LOCK_NAME = "up.lock"
STATE_NAME = "up.json"


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


def _echo(text: str, *, err: bool = False) -> None:
    """``typer.echo`` that a closed terminal cannot turn into a crash before the stop."""
    with contextlib.suppress(OSError):  # EIO, EPIPE: after SIGHUP the terminal is gone
        typer.echo(text, err=err)


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


def admin_hint(home: Path) -> str:
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
    if any((Path(legacy) / marker).exists() for marker in STATE_MARKERS):
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
    cloud: Annotated[
        CloudChoice,
        typer.Option(
            help="The cloud double: devcloud (Alibaba Cloud's API) or aws-moto (AWS through "
            "a local moto server on the --devcloud-port; a checkout with the dev install).",
        ),
    ] = CloudChoice.DEVCLOUD,
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
    state, lock = _take_state(home)
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
            cloud=cloud.value,
        )
    finally:
        lock.release(ports)


def _take_state(home: Path | None) -> tuple[Path, _StateLock]:
    """The state directory, made private, and its lock, taken.

    Raises ``typer.Exit(1)`` when the directory cannot be made private, ``typer.Exit(2)``
    when another ``up`` holds it.
    """
    state, note = state_home(home, os.environ)
    if note is not None:
        typer.echo(note, err=True)
    # The state is made private before anything is written into it (the lock first).
    lock = _StateLock(state.resolve())
    try:
        private = private_home(lock.home)
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
    return state, lock


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
    cloud: Cloud = "devcloud",
) -> None:
    """``up`` once it holds its state's lock."""
    taken = [f"{name} ({port})" for name, port in ports.items() if not port_free(port)]
    if taken:
        typer.echo(
            f"up: port in use: {', '.join(taken)}; stop what uses it or pass "
            "--webapp-port/--checkpoint-port/--devcloud-port",
            err=True,
        )
        raise typer.Exit(2)
    lock.record("running", ports)
    stack = Stack(
        state.resolve(),
        ports,
        instances,
        agent_interval,
        devcloud_admin=devcloud_admin,
        grace=agent_grace,
        cloud=cloud,
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


def _run(stack: Stack, ready_timeout: float, webapp_port: int) -> None:
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
    except Interrupted as exc:
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
        f"{admin_hint(stack.home)} Ctrl-C stops everything."
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

"""docker-compose.yml keeps the capability split of docs/architecture.md#components (parsed, never
run here).

Each service may hold only its own secrets: the signing key only in the checkpoint; the
write credential, trusted key set, receipt key and executor token only in the executor;
the read credential and agent token only in the agent; nothing secret in the web app.
Every secret reaches its service as a file (compose ``secrets:``), never through
``environment`` or ``env_file``, which ``docker inspect`` shows.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
import yaml
from alibabacloud_cms20190101 import models as cms_models
from darabonba.runtime import RuntimeOptions

from airlock import settings as airlock_settings
from airlock.cli import app

ROOT = Path(__file__).resolve().parents[2]
COMPOSE: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
AIRLOCK_SERVICES = ["checkpoint", "executor", "agent", "webapp", "devcloud"]
SETTINGS = {
    "checkpoint": airlock_settings.CheckpointSettings,
    "executor": airlock_settings.ExecutorSettings,
    "agent": airlock_settings.AgentSettings,
    "webapp": airlock_settings.WebappSettings,
    "devcloud": airlock_settings.DevcloudSettings,
}
SECRETISH = re.compile(r"(SECRET|TOKEN|PASSWORD|PRIVATE|_KEY_ID|DATABASE_URL)", re.IGNORECASE)


#: What each service may hold as a compose secret, and nothing more.
HOLDS: dict[str, set[str]] = {
    "postgres": {"postgres_password", "checkpoint_db_password", "executor_db_password"},
    "checkpoint": {"checkpoint_database_url"},
    "executor": {
        "executor_database_url",
        "executor_cloud_access_key_id",
        "executor_cloud_access_key_secret",
        "executor_checkpoint_token",
    },
    "agent": {
        "agent_cloud_access_key_id",
        "agent_cloud_access_key_secret",
        "agent_checkpoint_token",
    },
    "webapp": set(),
    "devcloud": {
        "devcloud_read_key_id",
        "devcloud_read_key_secret",
        "devcloud_write_key_id",
        "devcloud_write_key_secret",
    },
}
GEN_KEYS = ROOT / "infra" / "scripts" / "gen-keys.sh"


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run infra/scripts/gen-keys.sh --demo into a temporary deploy/ tree."""
    root = tmp_path_factory.mktemp("deploy")
    subprocess.run(
        ["bash", str(GEN_KEYS), "--demo", str(root / "secrets")],
        check=True,
        capture_output=True,
    )
    return root


def _secret(generated: Path, name: str) -> str:
    """A secret's value as the service reads it (airlock._setting_files)."""
    source = Path(COMPOSE["secrets"][name]["file"])
    return (generated / source.relative_to("deploy")).read_text().removesuffix("\n")


def _env_file(generated: Path, service: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for ref in SERVICES[service].get("env_file", []):
        path = generated / Path(ref).relative_to("deploy")
        for line in path.read_text().splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.partition("=")
                out[key] = value
    return out


def _environment(service: str) -> dict[str, str]:
    env = SERVICES[service].get("environment", {})
    return {str(k): str(v) for k, v in env.items()}


def test_every_service_is_declared() -> None:
    assert set(SERVICES) == {"checkpoint", "executor", "agent", "webapp", "postgres", "devcloud"}
    assert SERVICES["devcloud"]["profiles"] == ["demo"]
    for name in ("checkpoint", "executor", "agent", "webapp", "postgres"):
        assert "profiles" not in SERVICES[name], f"{name} must run by default"


def test_no_shared_env_file_and_no_dotenv() -> None:
    seen: dict[str, str] = {}
    for name, service in SERVICES.items():
        for ref in service.get("env_file", []):
            assert Path(ref).name != ".env", f"{name} reads a shared .env"
            assert ref not in seen, f"{name} and {seen.get(ref)} share {ref}"
            seen[ref] = name


def test_only_the_checkpoint_holds_the_signing_key() -> None:
    holders = [
        name
        for name, service in SERVICES.items()
        if any("checkpoint-keys" in str(v) for v in service.get("volumes", []))
    ]
    assert holders == ["checkpoint"]


def test_only_the_executor_holds_the_receipt_key_and_the_trusted_key_set() -> None:
    holders = [
        name
        for name, service in SERVICES.items()
        if any("executor-keys" in str(v) for v in service.get("volumes", []))
    ]
    assert holders == ["executor"]
    key = Path(_environment("executor")["AIRLOCK_EXECUTOR_RECEIPT_KEY_PATH"])
    assert "executor-keys:" + str(key.parent) in SERVICES["executor"]["volumes"]
    trusting = [
        name
        for name, s in SERVICES.items()
        if "AIRLOCK_EXECUTOR_TRUSTED_KEYS_PATH" in s.get("environment", {})
    ]
    assert trusting == ["executor"]


def test_the_executor_sees_a_key_set_replaced_by_rename_while_it_runs() -> None:
    """A single-file bind mount stays on the inode the file had when the container
    started: a key set replaced by rename (a stage, rotation or revocation exported as it
    should be) would never reach the running executor. The directory is mounted."""
    inside = Path(_environment("executor")["AIRLOCK_EXECUTOR_TRUSTED_KEYS_PATH"])
    mounts = [str(v).split(":") for v in SERVICES["executor"].get("volumes", [])]
    holding = [m for m in mounts if inside.is_relative_to(m[1])]
    assert len(holding) == 1, mounts
    source, target, mode = holding[0]
    assert Path(target) == inside.parent and mode == "ro"
    assert source == "./deploy/public" and not source.endswith(".json")


def _keygen_command() -> list[str]:
    """The `executor keygen` that gen-keys.sh and docs/operations.md print, and where it writes."""
    found = set()
    for path in (ROOT / "docs" / "operations.md", GEN_KEYS):
        found.update(
            re.findall(
                r"docker compose run --rm --no-deps -T executor (executor keygen [^>\n]+)> "
                r"(\S+/receipt-keys.json)",
                path.read_text(),
            )
        )
    assert {target for _, target in found} == {
        "$public/receipt-keys.json",  # gen-keys.sh
        "deploy/public/receipt-keys.json",  # docs/operations.md
    }, found
    assert len({args for args, _ in found}) == 1, found
    return shlex.split(found.pop()[0])


def test_the_checkpoint_verifies_outcomes_against_the_executors_receipt_key(
    tmp_path: Path,
) -> None:
    """The checkpoint refuses to start without a receipt key set: compose mounts the one
    the printed `executor keygen --public -` writes, which is the public half of the key
    it makes inside the executor's volume (0600 there; it never exists on the host)."""
    from airlock.protocol import KeySet
    from services.executor import ReceiptSigner

    inside = _environment("checkpoint")["AIRLOCK_CHECKPOINT_RECEIPT_KEYS_PATH"]
    mounts = [str(v) for v in SERVICES["checkpoint"].get("volumes", [])]
    sources = [m.split(":")[0] for m in mounts if m.split(":")[1:2] == [inside]]
    assert sources == ["./deploy/public/receipt-keys.json"]
    assert any(m == f"{sources[0]}:{inside}:ro" for m in mounts)

    key = tmp_path / "executor-keys" / "receipt.pem"
    key.parent.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
    env.update(AIRLOCK_ENV="dev", AIRLOCK_EXECUTOR_RECEIPT_KEY_PATH=str(key), PYTHONPATH=str(ROOT))
    result = subprocess.run(
        [sys.executable, "-m", "airlock.cli", *_keygen_command()],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        timeout=60,
        check=True,
    )
    signer = ReceiptSigner.from_file(key)  # refuses a key others could read
    assert list(KeySet.from_json_bytes(result.stdout)) == [signer.keyid]
    assert result.stderr.decode() == f"receipt key {signer.keyid} written to {key}\n"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600


def _held_file(service: str, variable: str) -> str:
    """The secret a service's ``VARIABLE_FILE`` names, checked to be one it holds."""
    path = Path(_environment(service)[f"{variable}_FILE"])
    assert path.parent == Path("/run/secrets") and path.name in SERVICES[service]["secrets"]
    return path.name


def test_cloud_credentials_go_to_the_right_service(generated: Path) -> None:
    def value(service: str, variable: str) -> str:
        return _secret(generated, _held_file(service, variable))

    # the executor gets the write key, the agent the read key, and they differ
    for part in ("ID", "SECRET"):
        executor = value("executor", f"AIRLOCK_EXECUTOR_CLOUD_ACCESS_KEY_{part}")
        agent = value("agent", f"AIRLOCK_AGENT_CLOUD_ACCESS_KEY_{part}")
        assert executor == value("devcloud", f"AIRLOCK_DEVCLOUD_WRITE_KEY_{part}")
        assert agent == value("devcloud", f"AIRLOCK_DEVCLOUD_READ_KEY_{part}")
        assert executor != agent
        # and never the public dev defaults
        for default in (airlock_settings.DEVCLOUD_READ_KEY, airlock_settings.DEVCLOUD_WRITE_KEY):
            assert executor not in default and agent not in default
    for name in ("checkpoint", "webapp", "postgres"):
        assert not any("cloud" in s for s in SERVICES[name].get("secrets", [])), name
        values = str(_env_file(generated, name)) + str(_environment(name))
        assert "CLOUD_ACCESS_KEY" not in values, f"{name} must hold no cloud credential"


def test_each_service_holds_exactly_its_own_secrets() -> None:
    assert {name: set(s.get("secrets", [])) for name, s in SERVICES.items()} == HOLDS
    assert set(COMPOSE["secrets"]) == set().union(*HOLDS.values())
    for name, secret in COMPOSE["secrets"].items():
        assert secret == {"file": f"deploy/secrets/{name}"}, name


def test_no_service_gets_a_secret_through_environment_or_env_file(generated: Path) -> None:
    """``docker inspect`` shows a container's environment, env_file's lines included: a
    secret may only be named there by a ``*_FILE`` variable, as a file the service holds,
    and no secret's value appears in any service's environment at all."""
    values = [_secret(generated, name) for name in COMPOSE["secrets"]]
    values = [v for v in values if v]  # the two tokens are empty until `tokens create`
    assert len(values) == len(COMPOSE["secrets"]) - 2
    for name in SERVICES:
        env = {**_env_file(generated, name), **_environment(name)}
        for key, value in env.items():
            if key.endswith("_FILE"):
                assert value.startswith("/run/secrets/"), f"{name}: {key}={value}"
                _held_file(name, key.removesuffix("_FILE"))
                continue
            assert not SECRETISH.search(key), f"{name} gets {key} through its environment"
            leaked = [v for v in values if v in value]
            assert not leaked, f"{name}: {key} holds a secret's value"
        # every secret a service holds is read, through its *_FILE variable
        named = {Path(v).name for k, v in env.items() if k.endswith("_FILE")}
        assert named == HOLDS[name], name


def test_every_secret_file_compose_mounts_is_generated(generated: Path) -> None:
    """compose fails to create a container whose secret file is missing: gen-keys.sh
    makes each one (the tokens empty, filled in by `tokens create`)."""
    made = {p.name for p in (generated / "secrets").iterdir()}
    assert made == set(COMPOSE["secrets"])
    for token in ("executor_checkpoint_token", "agent_checkpoint_token"):
        assert _secret(generated, token) == ""
    for service in SERVICES.values():
        for ref in service.get("env_file", []):
            assert (generated / Path(ref).relative_to("deploy")).is_file(), ref


def test_outside_the_demo_the_cloud_keys_are_the_given_ones_and_devcloud_gets_none(
    tmp_path: Path,
) -> None:
    given = {
        "ALIBABA_READ_KEY_ID": "LTAIread",
        "ALIBABA_READ_KEY_SECRET": "read-secret",
        "ALIBABA_WRITE_KEY_ID": "LTAIwrite",
        "ALIBABA_WRITE_KEY_SECRET": "write-secret",
    }
    subprocess.run(
        ["bash", str(GEN_KEYS), str(tmp_path / "secrets")],
        env={"PATH": os.environ["PATH"], **given},
        check=True,
        capture_output=True,
    )
    assert {p.name for p in (tmp_path / "secrets").iterdir()} == set(COMPOSE["secrets"])
    for name in COMPOSE["secrets"]:
        value = _secret(tmp_path, name)
        if name.startswith("devcloud_"):
            assert value == "", name
    assert _secret(tmp_path, "agent_cloud_access_key_id") == "LTAIread"
    assert _secret(tmp_path, "agent_cloud_access_key_secret") == "read-secret"
    assert _secret(tmp_path, "executor_cloud_access_key_id") == "LTAIwrite"
    assert _secret(tmp_path, "executor_cloud_access_key_secret") == "write-secret"
    for config in ("executor", "agent"):
        assert "ENDPOINT" not in (tmp_path / "config" / f"{config}.env").read_text()


def test_the_web_app_holds_nothing_secret() -> None:
    webapp = SERVICES["webapp"]
    assert "env_file" not in webapp
    assert "secrets" not in webapp
    assert not webapp.get("volumes")
    assert [k for k in _environment("webapp") if SECRETISH.search(k)] == []


def test_checkpoint_and_executor_use_separate_databases_and_roles(generated: Path) -> None:
    checkpoint = _secret(generated, _held_file("checkpoint", "AIRLOCK_CHECKPOINT_DATABASE_URL"))
    executor = _secret(generated, _held_file("executor", "AIRLOCK_EXECUTOR_DATABASE_URL"))
    pattern = re.compile(r"postgresql://(\w+):(\w+)@postgres:5432/(\w+)$")
    cp, ex = pattern.match(checkpoint), pattern.match(executor)
    assert cp and ex
    assert (cp[1], cp[3]) == ("checkpoint", "checkpoint")
    assert (ex[1], ex[3]) == ("executor", "executor")
    assert cp[2] != ex[2], "each role has its own password"
    # postgres creates each role with the password its service's URL carries
    assert cp[2] == _secret(generated, "checkpoint_db_password")
    assert ex[2] == _secret(generated, "executor_db_password")
    assert "executor_database_url" not in SERVICES["checkpoint"]["secrets"]
    assert "checkpoint_database_url" not in SERVICES["executor"]["secrets"]
    init = (ROOT / "infra" / "postgres" / "init-databases.sh").read_text()
    assert "CREATE DATABASE checkpoint OWNER checkpoint" in init
    assert "CREATE DATABASE executor OWNER executor" in init
    assert "REVOKE ALL ON DATABASE executor FROM PUBLIC" in init


def test_postgres_creates_the_roles_with_the_passwords_from_its_secret_files(
    generated: Path, tmp_path: Path
) -> None:
    """init-databases.sh reads the two role passwords from the files compose mounts (a
    psql double on PATH records what it is given), not from the environment."""
    env_of_postgres = _environment("postgres")
    record = tmp_path / "psql.args"
    fake = tmp_path / "bin" / "psql"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {record}\ncat >> {record}\n')
    fake.chmod(0o755)
    env = {"PATH": f"{fake.parent}:/usr/bin:/bin", "POSTGRES_USER": "postgres"}
    for variable in ("AIRLOCK_CHECKPOINT_DB_PASSWORD_FILE", "AIRLOCK_EXECUTOR_DB_PASSWORD_FILE"):
        mounted = Path(env_of_postgres[variable])
        assert mounted.parent == Path("/run/secrets")
        env[variable] = str(generated / "secrets" / mounted.name)
    subprocess.run(
        ["bash", str(ROOT / "infra" / "postgres" / "init-databases.sh")],
        env=env,
        check=True,
        capture_output=True,
    )
    args = record.read_text()
    assert f"--set=cp_pw={_secret(generated, 'checkpoint_db_password')}\n" in args
    assert f"--set=ex_pw={_secret(generated, 'executor_db_password')}\n" in args
    assert "CREATE ROLE checkpoint LOGIN PASSWORD :'cp_pw';" in args
    assert env_of_postgres["POSTGRES_PASSWORD_FILE"] == "/run/secrets/postgres_password"


def test_generated_secrets_are_reachable_only_through_their_directory(generated: Path) -> None:
    """compose bind-mounts a secret file with its host owner and mode (it ignores a
    secret's uid, gid and mode outside swarm): each file is readable by the services'
    users, and the 0700 directory keeps everyone but its owner from reaching it."""
    secrets = generated / "secrets"
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o700
    assert secrets.stat().st_uid == os.getuid()
    for path in secrets.iterdir():
        assert path.is_file() and not path.is_symlink()
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path.name


_CAN_MOUNT = (
    sys.platform == "linux"
    and os.geteuid() == 0
    and shutil.which("unshare") is not None
    and shutil.which("setpriv") is not None
)


@pytest.mark.skipif(not _CAN_MOUNT, reason="needs root, unshare and setpriv (Linux)")
def test_a_normal_user_generates_secrets_the_services_users_can_read() -> None:
    """gen-keys.sh run by a normal user (uid 65534 here): each secret, bind-mounted as
    compose does, reads as the airlock image's user (uid 10001) and as postgres's (999),
    while neither can reach the files on the host."""
    # Not pytest's tmp_path: its base directory is 0700, closed to the other users.
    with tempfile.TemporaryDirectory(prefix="airlock-gen-keys-") as name:
        top = Path(name)
        top.chmod(0o755)
        _generate_and_mount(top)


def _generate_and_mount(tmp_path: Path) -> None:
    deploy = tmp_path / "deploy"
    deploy.mkdir(mode=0o777)
    deploy.chmod(0o777)  # the normal user's own directory
    as_user = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    subprocess.run(
        [*as_user, "bash", str(GEN_KEYS), "--demo", str(deploy / "secrets")],
        check=True,
        capture_output=True,
        cwd=tmp_path,
    )
    mounted = tmp_path / "run-secrets"
    mounted.mkdir(mode=0o755)
    for name in COMPOSE["secrets"]:
        source = deploy / "secrets" / name
        target = mounted / name
        target.touch()
        for uid in (10001, 999):
            read = f"setpriv --reuid={uid} --regid={uid} --clear-groups cat"
            inside = subprocess.run(
                [
                    *("unshare", "-m", "sh", "-c"),
                    *(f'mount --bind "$1" "$2" && {read} "$2"', "-", str(source), str(target)),
                ],
                capture_output=True,
                check=False,
            )
            assert inside.returncode == 0, (name, uid, inside.stderr)
            assert inside.stdout == source.read_bytes()
            outside = subprocess.run([*read.split(), str(source)], capture_output=True, check=False)
            assert outside.returncode != 0, f"uid {uid} reads {name} on the host"


def test_ports_are_bound_to_loopback() -> None:
    for name, service in SERVICES.items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"


def test_dependencies_wait_for_health() -> None:
    for name, service in SERVICES.items():
        for dep, cond in (service.get("depends_on") or {}).items():
            assert cond == {"condition": "service_healthy"}, f"{name} -> {dep}"
            assert "healthcheck" in SERVICES[dep], f"{dep} has no healthcheck"


def test_every_long_running_service_has_a_healthcheck() -> None:
    for name, service in SERVICES.items():
        assert "healthcheck" in service, name


@pytest.mark.parametrize("name", ["executor", "agent"])
def test_the_daemons_healthchecks_read_the_heartbeat_their_loops_write(name: str) -> None:
    test = SERVICES[name]["healthcheck"]["test"]
    assert test[:4] == ["CMD", "airlock", name, "health"]
    _parse(test[2:])
    path = test[test.index("--path") + 1]
    assert _environment(name)[f"AIRLOCK_{name.upper()}_HEARTBEAT_PATH"] == path
    assert path.startswith("/tmp/")  # the one writable place (read_only, tmpfs /tmp)
    max_age = int(test[test.index("--max-age") + 1])
    interval = int(str(SERVICES[name]["healthcheck"]["interval"]).removesuffix("s"))
    assert max_age > 2 * interval


def test_required_variables_fail_loudly() -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    for var in ("AIRLOCK_AUDIENCE", "AIRLOCK_ACCOUNT", "AIRLOCK_REGION"):
        uses = re.findall(r"\$\{" + var + r"([^}]*)\}", text)
        assert uses and all(u.startswith(":?") for u in uses), f"${{{var}}} must be required"


def test_environment_names_match_each_service_settings(generated: Path) -> None:
    for name in AIRLOCK_SERVICES:
        prefix = f"AIRLOCK_{name.upper()}_"
        fields = set(SETTINGS[name].model_fields)
        names = {**_env_file(generated, name), **_environment(name)}
        for key in names:
            if key == "AIRLOCK_ENV":
                continue
            assert key.startswith(prefix), f"{name} is given another service's setting {key}"
            setting = key[len(prefix) :].lower()
            if setting not in fields:  # AIRLOCK_<SERVICE>_<NAME>_FILE
                setting = setting.removesuffix("_file")
            assert setting in fields, f"{key} is not a {name} setting"


def _docs_commands() -> list[list[str]]:
    """Every `docker compose run --rm [--no-deps] [-T] SERVICE ARGS` that the docs and
    gen-keys.sh print, as the ARGS given to `airlock`."""
    found = []
    for path in (ROOT / "README.md", ROOT / "docs" / "operations.md", GEN_KEYS):
        for match in re.finditer(
            r"docker compose run --rm (?:--no-deps |-T )*(\w+) ([^#>\n`]+)", path.read_text()
        ):
            assert match.group(1) in AIRLOCK_SERVICES, match.group(0)
            found.append(shlex.split(match.group(2).strip()))
    return found


def test_the_printed_deployment_commands_are_real_cli_invocations() -> None:
    """gen-keys.sh printed `tokens create --role executor`, which fails for want of the
    token's NAME (found in review): each printed command must parse."""
    commands = _docs_commands()
    assert len(commands) >= 6
    for args in commands:
        _parse(args)


def _parse(args: list[str]) -> None:
    """Parse ``airlock ARGS`` down to the leaf command, as the CLI would before running it.

    Typer ships its own copy of click, so its groups are not ``click.Group``: test for a
    group by what it can do (an isinstance test here once made this check vacuous).
    """
    command: Any = typer.main.get_command(app)
    ctx = command.make_context("airlock", list(args))
    while hasattr(command, "resolve_command"):
        # The subcommand's name sits in the protected args (private from click 8.2 on).
        protected = getattr(ctx, "_protected_args", None) or getattr(ctx, "protected_args", [])
        if not [*protected, *ctx.args]:
            break  # a group run on its own (`airlock executor`: the daemon)
        sub_name, sub, rest = command.resolve_command(ctx, [*protected, *ctx.args])
        assert sub is not None and sub_name is not None
        ctx = sub.make_context(sub_name, rest, parent=ctx)
        command = sub
    # Typer leaves a missing required argument for the call to report: check it here.
    missing = [p.name for p in command.params if p.required and ctx.params.get(p.name) is None]
    assert not missing, f"airlock {' '.join(args)}: missing {missing}"


@pytest.mark.parametrize("name", AIRLOCK_SERVICES)
def test_each_command_is_a_real_cli_invocation(name: str) -> None:
    _parse([str(a) for a in SERVICES[name]["command"]])


def test_dockerfile_runs_as_non_root_from_a_slim_base_without_build_tools() -> None:
    text = (ROOT / "infra" / "Dockerfile").read_text()
    stages = re.split(r"^FROM ", text, flags=re.MULTILINE)[1:]
    final = stages[-1]
    assert final.startswith("python:3.11-slim")
    assert re.search(r"^USER 10001", final, re.MULTILINE)
    for tool in ("gcc", "build-essential", "apt-get install", "make "):
        assert tool not in final, f"the final image installs {tool}"


def test_every_named_volume_below_the_home_exists_in_the_image_owned_by_airlock() -> None:
    """Docker gives a new named volume the owner of the image's directory at its mount
    point, and root's when the image has none: the non-root services could then not
    write there (the checkpoint's keys, found in review)."""
    text = (ROOT / "infra" / "Dockerfile").read_text()
    made = set(re.findall(r"install -d -m 0700 -o airlock -g airlock (\S+)", text))
    home = "/var/lib/airlock"
    for name, service in COMPOSE["services"].items():
        for volume in service.get("volumes", []):
            source, target = str(volume).split(":")[:2]
            if source in COMPOSE.get("volumes", {}) and target.startswith(home + "/"):
                assert target in made, f"{name}: {target} is not made in the image"


def _interpolate(value: str, variables: dict[str, str]) -> str:
    """compose's ``${VAR}``, ``${VAR:-default}`` and ``${VAR:?message}`` over ``variables``."""

    def one(match: re.Match[str]) -> str:
        name, op, rest = match.group(1), match.group(2) or "", match.group(3) or ""
        if variables.get(name):
            return variables[name]
        assert op != ":?", f"${{{name}}} is required: {rest}"
        return rest

    return re.sub(r"\$\{(\w+)(:-|:\?)?([^}]*)\}", one, value)


def test_every_service_bound_to_an_account_is_bound_to_the_same_one() -> None:
    """AIRLOCK_ACCOUNT names the account of every action (agent), the one the executor
    may write to, and under the demo profile the one devcloud serves: one variable."""
    bound = {
        "agent": "AIRLOCK_AGENT_ACCOUNT",
        "executor": "AIRLOCK_EXECUTOR_ACCOUNT",
        "devcloud": "AIRLOCK_DEVCLOUD_ACCOUNT",
    }
    for service, variable in bound.items():
        assert re.fullmatch(r"\$\{AIRLOCK_ACCOUNT:\?[^}]*\}", _environment(service)[variable])
    mentioned = [n for n, s in SERVICES.items() if "${AIRLOCK_ACCOUNT" in str(s.get("environment"))]
    assert sorted(mentioned) == sorted(bound)


def test_the_demo_devcloud_seeds_its_fleet_once_and_serves_the_configured_account(
    generated: Path, tmp_path: Path
) -> None:
    """docker-compose.yml's devcloud entry, run as its command with its environment (the
    /run/secrets files and its volume mapped to the generated ones here): a fleet on the
    first start, the same fleet after a restart, and AIRLOCK_ACCOUNT in its metrics."""
    from airlock.cloud.alibaba import AlibabaConfig, AlibabaReader
    from airlock.cloud.alibaba.writer import AlibabaWriter
    from devstack.ports import free_port
    from tests.support.polling import wait_for

    account = "1111222233334444"
    region = "cn-hangzhou"  # the agent scans AIRLOCK_REGION: the fleet must be there
    variables = {
        "AIRLOCK_ACCOUNT": account,
        "AIRLOCK_REGION": region,
        "AIRLOCK_DEMO_INSTANCES": "20",
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
    env["PYTHONPATH"] = str(ROOT)
    for key, raw in _environment("devcloud").items():
        value = _interpolate(raw, variables)
        if value.startswith("/run/secrets/"):
            value = str(generated / "secrets" / Path(value).name)
        elif value.startswith("/var/lib/airlock/"):
            value = str(tmp_path / Path(value).name)
        env[key] = value
    port = free_port()
    command = [str(a) for a in SERVICES["devcloud"]["command"]]
    command[command.index("--host") + 1] = "127.0.0.1"
    command[command.index("--port") + 1] = str(port)

    def config(kind: str) -> AlibabaConfig:
        return AlibabaConfig(
            _secret(generated, f"devcloud_{kind}_key_id"),
            _secret(generated, f"devcloud_{kind}_key_secret"),
            endpoint=f"127.0.0.1:{port}",
            protocol="http",
        )

    def fleet() -> dict[str, str]:
        reader = AlibabaReader(config("read"))
        return {
            s.resource_id: s.status
            for kind in ("ecs.instance", "rds.instance")
            for s in reader.list_instances(region, kind)  # type: ignore[arg-type]
        }

    def serving() -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "airlock.cli", *command],
            cwd=tmp_path,
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )

        def up() -> bool:
            assert proc.poll() is None, proc.communicate()[1]
            try:
                return httpx.get(f"http://127.0.0.1:{port}/_health", timeout=1).is_success
            except httpx.TransportError:
                return False

        wait_for("devcloud", up, timeout=60, every=0.05)
        return proc

    def stop(proc: subprocess.Popen[str]) -> str:
        proc.terminate()
        return proc.communicate(timeout=30)[1]

    proc = serving()
    try:
        first = fleet()
        assert len(first) == 20 + 2  # and a tenth as many RDS
        ecs = sorted(i for i, s in first.items() if i.startswith("i-") and s == "Running")[0]
        AlibabaWriter(config("write")).stop_ecs(region, ecs, stopped_mode="StopCharging")
        cms = AlibabaReader(config("read"))._clients.get("cms", region)
        now = int(time.time())
        body = cms.describe_metric_list_with_options(
            cms_models.DescribeMetricListRequest(
                namespace="acs_ecs_dashboard",
                metric_name="CPUUtilization",
                dimensions=json.dumps([{"instanceId": ecs}]),
                period="3600",
                start_time=str((now - 86_400) * 1000),
                end_time=str(now * 1000),
            ),
            RuntimeOptions(),
        ).body
        points = json.loads(body.datapoints)
        assert points and {p["userId"] for p in points} == {account}
    finally:
        log = stop(proc)
    assert "seeded 22 instances" in log

    proc = serving()  # a restart keeps what the volume holds
    try:
        again = fleet()
    finally:
        log = stop(proc)
    assert "seeded" not in log
    assert set(again) == set(first)
    assert again[ecs] in ("Stopping", "Stopped")

"""docker-compose.yml keeps the capability split of docs/architecture.md#components (parsed, never
run here).

Each service may hold only its own secrets: the signing key only in the checkpoint; the
write credential, trusted key set, receipt key and executor token only in the executor;
the read credential and agent token only in the agent; nothing secret in the web app.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml

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


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run infra/scripts/gen-keys.sh --demo into a temporary deploy/ tree."""
    root = tmp_path_factory.mktemp("deploy")
    subprocess.run(
        ["bash", str(ROOT / "infra" / "scripts" / "gen-keys.sh"), "--demo", str(root / "secrets")],
        check=True,
        capture_output=True,
    )
    return root


def _env_file(generated: Path, service: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for ref in SERVICES[service].get("env_file", []):
        path = generated / "secrets" / Path(ref).name
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
    secret_holders = [name for name, s in SERVICES.items() if s.get("secrets")]
    assert secret_holders == ["executor"]
    assert SERVICES["executor"]["secrets"] == ["executor_receipt_key"]
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


def test_the_checkpoint_verifies_outcomes_against_the_generated_receipt_key(
    generated: Path,
) -> None:
    """The checkpoint refuses to start without a receipt key set: compose must mount the
    public set gen-keys.sh derives from the executor's receipt key, and only that."""
    from airlock.protocol import KeySet
    from services.executor import ReceiptSigner

    inside = _environment("checkpoint")["AIRLOCK_CHECKPOINT_RECEIPT_KEYS_PATH"]
    mounts = [str(v) for v in SERVICES["checkpoint"].get("volumes", [])]
    sources = [m.split(":")[0] for m in mounts if m.split(":")[1:2] == [inside]]
    assert sources == ["./deploy/public/receipt-keys.json"]
    assert any(m == f"{sources[0]}:{inside}:ro" for m in mounts)
    key_set = KeySet.from_json_bytes((generated / "public" / "receipt-keys.json").read_bytes())
    signer = ReceiptSigner.from_file(generated / "secrets" / "executor-receipt.pem")
    assert list(key_set) == [signer.keyid]


def test_cloud_credentials_go_to_the_right_service(generated: Path) -> None:
    executor, agent = _env_file(generated, "executor"), _env_file(generated, "agent")
    devcloud = _env_file(generated, "devcloud")
    # the executor gets the write key, the agent the read key, and they differ
    assert (
        executor["AIRLOCK_EXECUTOR_CLOUD_ACCESS_KEY_ID"]
        == devcloud["AIRLOCK_DEVCLOUD_WRITE_KEY_ID"]
    )
    assert agent["AIRLOCK_AGENT_CLOUD_ACCESS_KEY_ID"] == devcloud["AIRLOCK_DEVCLOUD_READ_KEY_ID"]
    assert (
        executor["AIRLOCK_EXECUTOR_CLOUD_ACCESS_KEY_ID"]
        != agent["AIRLOCK_AGENT_CLOUD_ACCESS_KEY_ID"]
    )
    # and never the public dev defaults
    for key_id, _ in (airlock_settings.DEVCLOUD_READ_KEY, airlock_settings.DEVCLOUD_WRITE_KEY):
        assert key_id not in str(executor) + str(agent) + str(devcloud)
    for name in ("checkpoint", "webapp"):
        values = str(_env_file(generated, name)) + str(_environment(name))
        assert "CLOUD_ACCESS_KEY" not in values, f"{name} must hold no cloud credential"


def test_the_web_app_holds_nothing_secret() -> None:
    webapp = SERVICES["webapp"]
    assert "env_file" not in webapp
    assert "secrets" not in webapp
    assert not webapp.get("volumes")
    assert [k for k in _environment("webapp") if SECRETISH.search(k)] == []


def test_checkpoint_and_executor_use_separate_databases_and_roles(generated: Path) -> None:
    checkpoint = _env_file(generated, "checkpoint")["AIRLOCK_CHECKPOINT_DATABASE_URL"]
    executor = _env_file(generated, "executor")["AIRLOCK_EXECUTOR_DATABASE_URL"]
    pattern = re.compile(r"postgresql://(\w+):(\w+)@postgres:5432/(\w+)$")
    cp, ex = pattern.match(checkpoint), pattern.match(executor)
    assert cp and ex
    assert (cp[1], cp[3]) == ("checkpoint", "checkpoint")
    assert (ex[1], ex[3]) == ("executor", "executor")
    assert cp[2] != ex[2], "each role has its own password"
    assert "AIRLOCK_EXECUTOR_DATABASE_URL" not in _env_file(generated, "checkpoint")
    assert "AIRLOCK_CHECKPOINT_DATABASE_URL" not in _env_file(generated, "executor")
    init = (ROOT / "infra" / "postgres" / "init-databases.sh").read_text()
    assert "CREATE DATABASE checkpoint OWNER checkpoint" in init
    assert "CREATE DATABASE executor OWNER executor" in init
    assert "REVOKE ALL ON DATABASE executor FROM PUBLIC" in init


def test_generated_secrets_are_private(generated: Path) -> None:
    for path in (generated / "secrets").iterdir():
        assert path.stat().st_mode & 0o077 == 0, f"{path.name} is readable by others"


def test_ports_are_bound_to_loopback() -> None:
    for name, service in SERVICES.items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"


def test_dependencies_wait_for_health() -> None:
    for name, service in SERVICES.items():
        for dep, cond in (service.get("depends_on") or {}).items():
            assert cond == {"condition": "service_healthy"}, f"{name} -> {dep}"
            assert "healthcheck" in SERVICES[dep], f"{dep} has no healthcheck"


def test_every_long_running_airlock_service_but_the_agent_has_a_healthcheck() -> None:
    for name in ("postgres", "checkpoint", "executor", "webapp", "devcloud"):
        assert "healthcheck" in SERVICES[name], name
    test = SERVICES["executor"]["healthcheck"]["test"]
    assert test[:4] == ["CMD", "airlock", "executor", "health"]
    assert SERVICES["executor"]["environment"]["AIRLOCK_EXECUTOR_HEARTBEAT_PATH"] == test[-1]


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
            assert key[len(prefix) :].lower() in fields, f"{key} is not a {name} setting"


def _docs_commands() -> list[list[str]]:
    """Every `docker compose run --rm checkpoint ARGS` that the docs and gen-keys.sh print."""
    found = []
    docs = (ROOT / "README.md", ROOT / "docs" / "operations.md")
    for path in (*docs, ROOT / "infra" / "scripts" / "gen-keys.sh"):
        for match in re.finditer(
            r"docker compose run --rm checkpoint ([^#>\n`]+)", path.read_text()
        ):
            found.append(shlex.split(match.group(1).strip()))
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

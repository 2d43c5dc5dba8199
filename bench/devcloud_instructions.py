"""Instructions devcloud spends per live re-read and write: the cloud double's own CPU.

``python -m bench.devcloud_instructions [--small 20] [--large 120]`` runs devcloud's app
under uvicorn (h11, as ``airlock devcloud serve`` runs it) in a process under valgrind's
cachegrind, and drives it from a second process that valgrind does not count: for each
item, what an execution asks of the cloud, through the real Alibaba SDK adapters — the
live re-read (``AlibabaReader.get_state``, one ``DescribeInstances``) and the write
(``AlibabaWriter.stop_ecs``, one ``StopInstance``). Two runs of ``--small`` and
``--large`` items; their difference per item is printed, so start-up, imports and
seeding (the same in both) cancel out. devcloud shares the cores with the system it
stands beside in ``bench_e2e``, so every instruction here is one the system under test
does not get. Needs ``valgrind``.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

from bench._harness import instructions_main
from devstack.ports import free_port

_WARM = 20


def _ids(largest: int) -> list[str]:
    return [f"i-bench{n:07d}" for n in range(_WARM + largest)]


def _drive(port: int, count: int, largest: int) -> None:
    """The client: re-read and stop ``count`` instances after the warm-up ones."""
    from airlock.settings import DEVCLOUD_READ_KEY, DEVCLOUD_WRITE_KEY
    from devstack.devcloud import DevcloudAdmin, DevcloudHandle
    from devstack.stack import REGION

    cloud = DevcloudHandle(
        endpoint=f"127.0.0.1:{port}",
        base_url=f"http://127.0.0.1:{port}",
        read_key=DEVCLOUD_READ_KEY,
        write_key=DEVCLOUD_WRITE_KEY,
        admin=DevcloudAdmin(f"http://127.0.0.1:{port}", "unused-admin-token"),
        db_path=Path(),
        pid=0,
    )
    # Under valgrind devcloud is some fifty times slower than it is.
    reader = cloud.reader(read_timeout_ms=60_000)
    writer = cloud.writer(read_timeout_ms=60_000)
    for rid in _ids(largest)[: _WARM + count]:
        state = reader.get_state(REGION, "ecs.instance", rid)
        if state is None or state.status != "Running":
            raise RuntimeError(f"bench instance {rid} is not running: {state}")
        writer.stop_ecs(REGION, rid, stopped_mode="StopCharging")
    cloud.admin.close()


async def _serve(count: int, largest: int) -> None:
    import uvicorn

    from airlock.settings import DevcloudSettings
    from services.devcloud.app import create_app
    from services.devcloud.fleet import InstanceSpec
    from services.devcloud.store import Store

    with tempfile.TemporaryDirectory(dir="/dev/shm") as tmp:
        settings = DevcloudSettings(db_path=Path(tmp) / "devcloud.db", transition_seconds=0.3)
        store = Store(settings.db_path, transition_seconds=0.3)
        now = int(time.time())
        store.add_instances(
            InstanceSpec(
                id=rid,
                kind="ecs",
                region="ap-southeast-1",
                name=rid,
                status="Running",
                instance_type="ecs.g7.large",
                created_at=now - 30 * 86_400,
                tags=(),
                truth="",
                profile="idle",
                has_memory=True,
            )
            for rid in _ids(largest)
        )
        port = free_port()
        config = uvicorn.Config(
            create_app(settings, store=store),
            host="127.0.0.1",
            port=port,
            log_level="warning",
            timeout_graceful_shutdown=1,
        )
        server = uvicorn.Server(config)
        serving = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.05)
        driver = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.devcloud_instructions",
            "--drive", str(port), str(count), str(largest),
        )  # fmt: skip
        if await driver.wait() != 0:
            raise RuntimeError("the devcloud driver failed")
        server.should_exit = True
        await serving


def _run(count: int, largest: int) -> None:
    os.environ["AIRLOCK_ENV"] = "dev"
    asyncio.run(_serve(count, largest))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--drive"]:
        _drive(int(args[1]), int(args[2]), int(args[3]))
        return 0
    return instructions_main(
        argv,
        module="bench.devcloud_instructions",
        doc=__doc__,
        child=_run,
        what="devcloud serving a re-read + StopInstance through the SDK, under valgrind",
        per="re-read and write",
    )


if __name__ == "__main__":
    raise SystemExit(main())

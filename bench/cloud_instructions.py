"""Instructions per live re-read and write through the real Alibaba SDK: the executor's
cloud calls, in CPU that no neighbour moves.

``python -m bench.cloud_instructions [--small 20] [--large 120]`` starts devcloud (its
own process, not counted), then, under valgrind's cachegrind, makes for each item what
an execution makes at the cloud: the live re-read (``AlibabaReader.get_state``, one
``DescribeInstances``) and the write (``AlibabaWriter.stop_ecs``, one ``StopInstance``),
through the adapters and the SDK's own HTTP stack, as the executor's process does. Two
runs of ``--small`` and ``--large`` items; their difference per item is printed, so
start-up, imports and seeding (the same in both) cancel out. Needs ``valgrind``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from bench._harness import instructions_main
from devstack.devcloud import running_devcloud
from devstack.stack import REGION


def _run(count: int, largest: int) -> None:
    """Re-read and stop ``count`` instances after 20 warm-up ones (``largest`` + 20 are
    seeded, so every run seeds the same)."""
    with tempfile.TemporaryDirectory() as tmp, running_devcloud(Path(tmp) / "devcloud") as cloud:
        ids = [f"i-bench{n:07d}" for n in range(20 + largest)]
        for rid in ids:
            cloud.admin.create_instance(rid, status="Running")
        reader, writer = cloud.reader(), cloud.writer()
        for rid in ids[: 20 + count]:
            state = reader.get_state(REGION, "ecs.instance", rid)
            if state is None or state.status != "Running":
                raise RuntimeError(f"bench instance {rid} is not running: {state}")
            writer.stop_ecs(REGION, rid, stopped_mode="StopCharging")


def main(argv: list[str] | None = None) -> int:
    return instructions_main(
        argv,
        module="bench.cloud_instructions",
        doc=__doc__,
        child=_run,
        what="live re-read + StopInstance through the SDK at devcloud, under valgrind",
        per="re-read and write",
    )


if __name__ == "__main__":
    raise SystemExit(main())

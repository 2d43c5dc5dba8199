"""Discovery: every instance of the provider's resource types (ECS and RDS at Alibaba
Cloud, EC2 and RDS at AWS: :mod:`.providers`) in the configured regions, with its usage.

Reads only, through a :class:`~airlock.cloud.ports.CloudReader` — the agent is never
given a writer, and nothing here could call one. The scan streams: instances arrive page
by page, are assessed one page at a time and yielded, so memory is bounded by the page
size (one page of states and at most one page of per-instance usage buckets), never by
the fleet.

Metrics are read in stages, cheapest rejection first, and batched (CloudMonitor takes
several instance dimensions per ``DescribeMetricList`` call; when the reader offers
``get_metrics_many`` one paged query covers a whole batch):

1. the id, tags and age decide without a metric read: an id not in the provider's format
   is ``insufficient`` (never queried, never proposed), then protected / production /
   young instances;
2. hourly CPU for the remaining running instances (the p95 needs hours);
3. only for instances whose CPU is idle: memory (where the provider reports it) and
   network as **daily** points (period 86400; each value turned into the day's bytes in
   the provider's unit, :meth:`.providers.Metrics.net_bytes`);
4. for an idle or stopped instance (what may be proposed), when the reader offers
   ``get_price``: its type's price, read once per type and region in a scan (for RDS,
   per class, engine, storage type, zone and billing), for the
   saving the planner signs into the evidence. A price that cannot be read leaves the
   saving out; it never blocks a proposal.

Reads are safe to repeat, so a throttled or failed metric query is retried a few times
(its points are buffered and folded only once the whole query succeeded). A listing that
fails ends the scan with :class:`ScanError`: the adapter's pager cannot resume mid-way.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from pydantic import ValidationError

from airlock.cloud.ports import (
    CloudError,
    CloudReader,
    LiveState,
    MetricPoint,
    MetricsBatchReader,
    Price,
    PriceReader,
    RdsSpec,
    ResourceType,
)
from airlock.protocol import Resource
from airlock.text import inert

from .errors import ScanError
from .idle import (
    DAY,
    HOUR,
    IdlePolicy,
    Usage,
    UsageAccumulator,
    Verdict,
    Window,
    percent_to_bp,
)
from .providers import ALIBABA, AgentProvider, Metrics

__all__ = ["Discovery", "Observation", "ScanStats"]

_log = logging.getLogger("airlock.agent")


@dataclass(frozen=True, slots=True)
class Observation:
    """One instance as the scan saw it, and what the idle policy concluded."""

    state: LiveState
    observed_at: int  # Unix seconds, when its page was read
    verdict: Verdict
    usage: Usage | None
    window: Window
    #: The instance type's price, read for an instance that may be proposed; else None.
    price: Price | None = None


@dataclass(slots=True)
class ScanStats:
    instances: int = 0
    metric_queries: int = 0
    metric_retries: int = 0
    dropped_points: int = 0
    by_verdict: dict[str, int] = field(default_factory=dict)


class Discovery:
    def __init__(
        self,
        reader: CloudReader,
        policy: IdlePolicy,
        *,
        regions: Sequence[str],
        clock: Callable[[], int],
        page_size: int = 100,
        metric_batch: int = 100,
        workers: int = 1,
        reader_factory: Callable[[], CloudReader] | None = None,
        read_attempts: int = 3,
        retry_delay: float = 1.0,
        sleep: Callable[[float], None] = time.sleep,
        provider: AgentProvider = ALIBABA,
    ) -> None:
        if not regions:
            raise ValueError("at least one region")
        if workers < 1:
            raise ValueError("at least one worker")
        self._reader = reader
        self._policy = policy
        self._provider = provider
        self._regions = tuple(regions)
        self._clock = clock
        self._page_size = page_size
        self._metric_batch = metric_batch
        self._workers = workers
        self._reader_factory = reader_factory
        self._local = threading.local()
        self._readers: list[CloudReader] = [reader]
        self._readers_lock = threading.Lock()
        self._read_attempts = read_attempts
        self._retry_delay = retry_delay
        self._sleep = sleep
        self.stats = ScanStats()
        self._prices: dict[tuple[str, str, str, RdsSpec | None], Price | None] = {}
        self._prices_lock = threading.Lock()

    @property
    def provider(self) -> AgentProvider:
        return self._provider

    @property
    def regions(self) -> tuple[str, ...]:
        return self._regions

    def api_calls(self) -> dict[str, int]:
        """API calls by action over every reader, when they keep counts (AlibabaReader does)."""
        total: dict[str, int] = {}
        with self._readers_lock:
            readers = list(self._readers)
        for reader in readers:
            calls = getattr(reader, "calls", None)
            if isinstance(calls, dict):
                for name, n in calls.items():
                    total[name] = total.get(name, 0) + n
        return total

    def scan(self, now: int) -> Iterator[Observation]:
        """Every instance of every type in every region, assessed against the window.

        Pages are assessed by ``workers`` threads while the next page is listed, and
        yielded in listing order; at most ``workers + 1`` pages are in memory at once.
        """
        self.stats = ScanStats()
        with self._prices_lock:
            self._prices = {}  # prices are read afresh by each scan
        window = Window.ending_before(now, self._policy.window_days)
        with ThreadPoolExecutor(max_workers=self._workers, thread_name_prefix="scan") as pool:
            inflight: deque[Future[_Assessed]] = deque()
            for region in self._regions:
                for rtype in self._provider.resource_types:
                    for page in self._pages(region, rtype):
                        inflight.append(pool.submit(self._assess, region, rtype, page, window, now))
                        while len(inflight) > self._workers:
                            yield from self._emit(inflight.popleft().result())
            while inflight:
                yield from self._emit(inflight.popleft().result())

    def _emit(self, done: _Assessed) -> Iterator[Observation]:
        stats = self.stats
        stats.metric_queries += done.queries
        stats.metric_retries += done.retries
        stats.dropped_points += done.dropped
        for obs in done.observations:
            stats.instances += 1
            kind = obs.verdict.kind
            stats.by_verdict[kind] = stats.by_verdict.get(kind, 0) + 1
            yield obs

    def _pages(self, region: str, rtype: ResourceType) -> Iterator[list[LiveState]]:
        page: list[LiveState] = []
        try:
            for state in self._reader.list_instances(region, rtype, page_size=self._page_size):
                page.append(state)
                if len(page) == self._page_size:
                    yield page
                    page = []
        except CloudError as exc:
            raise ScanError(f"listing {rtype} in {region} failed: {exc}") from exc
        if page:
            yield page

    def _worker_reader(self) -> CloudReader:
        """Each worker thread's own reader when a factory is given (SDK clients and their
        call counters are then never shared across threads)."""
        if self._reader_factory is None or self._workers == 1:
            return self._reader
        reader: CloudReader | None = getattr(self._local, "reader", None)
        if reader is None:
            reader = self._reader_factory()
            self._local.reader = reader
            with self._readers_lock:
                self._readers.append(reader)
        return reader

    # -- one page (runs in a worker thread; touches no shared mutable state)

    def _assess(
        self, region: str, rtype: ResourceType, page: list[LiveState], window: Window, now: int
    ) -> _Assessed:
        work = _Assessed(observations=[])
        observed_at = self._clock()
        verdicts: dict[str, Verdict] = {}
        candidates: list[str] = []
        for state in page:
            early = self._before_metrics(state, now)
            if early is None:
                candidates.append(state.resource_id)
            else:
                verdicts[state.resource_id] = early
        usages: dict[str, Usage] = {}
        reader = self._worker_reader()
        for start in range(0, len(candidates), self._metric_batch):
            ids = candidates[start : start + self._metric_batch]
            _Stage(
                self,
                reader,
                work=work,
                region=region,
                window=window,
                names=self._provider.kind(rtype).metrics,
            ).run(ids, verdicts, usages)
        work.observations = [
            Observation(
                state=state,
                observed_at=observed_at,
                verdict=verdicts[state.resource_id],
                usage=usages.get(state.resource_id),
                window=window,
                price=self._price(reader, state, verdicts[state.resource_id]),
            )
            for state in page
        ]
        return work

    def _price(self, reader: CloudReader, state: LiveState, verdict: Verdict) -> Price | None:
        """The type's price when the instance may be proposed (idle, or stopped), else None."""
        stopped = (
            verdict.kind == "not_running"
            and state.status == self._provider.kind(state.resource_type).stopped
        )
        if not (verdict.idle or stopped) or not state.instance_type:
            return None
        if not isinstance(reader, PriceReader):
            return None
        key = (state.region, state.resource_type, state.instance_type, state.rds)
        with self._prices_lock:
            if key in self._prices:
                return self._prices[key]
        try:
            price = reader.get_price(
                state.region, state.resource_type, state.instance_type, rds=state.rds
            )
        except CloudError as exc:
            _log.warning(
                "%s",
                inert(f"no price for {state.instance_type} in {state.region}: {exc.code or exc}"),
            )
            price = None
        with self._prices_lock:
            self._prices[key] = price
        return price

    def _before_metrics(self, state: LiveState, now: int) -> Verdict | None:
        bad_id = _id_problem(state)
        if bad_id is not None:
            # Never queried or proposed (the protocol refuses such an id anyway), and kept
            # out of metric batches, where the adapter refuses it and would fail the batch.
            # The id is the provider's malformed text itself: escaped here, not only by the
            # CLI's log formatter, so that a library use of the agent cannot log it raw.
            _log.warning(
                "%s",
                inert(f"{state.resource_type} {state.resource_id} in {state.region}: {bad_id}"),
            )
            return Verdict("insufficient", (bad_id,))
        protected = self._policy.protection(state.tags)
        if protected is not None:
            return Verdict("protected", (protected,))
        if state.status != self._provider.kind(state.resource_type).running:
            return Verdict("not_running", (f"status {state.status}",))
        return self._policy.age_verdict(state.created_at, now)


def _id_problem(state: LiveState) -> str | None:
    """Why the listed id is not one the protocol accepts for its type, or None if it is.

    The kernel's :class:`~airlock.protocol.Resource` is the one definition of the format.
    """
    try:
        Resource.model_validate({"type": state.resource_type, "id": state.resource_id})
    except ValidationError:
        return f"resource id {state.resource_id!r} is not a valid {state.resource_type} id"
    return None


@dataclass(slots=True)
class _Assessed:
    observations: list[Observation]
    queries: int = 0
    retries: int = 0
    dropped: int = 0


class _Stage:
    """The metric stages for one batch of candidate instances of one type."""

    def __init__(
        self,
        discovery: Discovery,
        reader: CloudReader,
        *,
        work: _Assessed,
        region: str,
        window: Window,
        names: Metrics,
    ) -> None:
        self.d = discovery
        self.reader = reader
        self.work = work
        self.region = region
        self.window = window
        self.names = names

    def run(self, ids: list[str], verdicts: dict[str, Verdict], usages: dict[str, Usage]) -> None:
        policy = self.d._policy
        window = self.window
        # (1) daily CPU averages: a busy machine is ruled out with 14 points, not 336.
        try:
            daily = self._daily_cpu(ids)
        except CloudError as exc:
            for rid in ids:
                verdicts[rid] = Verdict("insufficient", (f"CPU metrics unavailable: {exc.code}",))
            return
        hourly_ids = []
        for rid in ids:
            busy = policy.daily_cpu_verdict(daily.get(rid, []))
            if busy is None:
                hourly_ids.append(rid)
            else:
                verdicts[rid] = busy
        if not hourly_ids:
            return
        # (2) hourly CPU: samples, average, p95 and the daily p95 series.
        accs = {rid: UsageAccumulator(window) for rid in hourly_ids}
        try:
            for rid, point in self._query(hourly_ids, self.names.cpu, HOUR):
                bp = self._bp(point.average)
                if bp is not None and rid in accs:
                    accs[rid].add_cpu(point.timestamp, bp)
        except CloudError as exc:
            for rid in hourly_ids:
                verdicts[rid] = Verdict("insufficient", (f"CPU metrics unavailable: {exc.code}",))
            return
        survivors = []
        for rid in hourly_ids:
            usage = accs[rid].usage(complete=False)
            cpu = policy.cpu_verdict(usage, window)
            if cpu is None:
                survivors.append(rid)
            else:
                verdicts[rid] = cpu
                usages[rid] = usage
        if not survivors:
            return
        # (3) memory and network, as daily points, only where CPU is idle.
        try:
            mem = self.names.mem
            for rid, point in self._query(survivors, mem, DAY) if mem is not None else ():
                bp = self._bp(point.average)
                if bp is not None and rid in accs:
                    accs[rid].add_mem(point.timestamp, bp)
            for metric in self.names.net:
                for rid, point in self._query(survivors, metric, DAY):
                    nbytes = self._bytes(point.average, DAY)
                    if nbytes is not None and rid in accs:
                        accs[rid].add_net(point.timestamp, nbytes)
        except CloudError as exc:
            for rid in survivors:
                verdicts[rid] = Verdict(
                    "insufficient", (f"memory/network metrics unavailable: {exc.code}",)
                )
            return
        for rid in survivors:
            usage = accs[rid].usage(complete=True)
            usages[rid] = usage
            verdicts[rid] = policy.verdict(usage, window)

    def _daily_cpu(self, ids: list[str]) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for rid, point in self._query(ids, self.names.cpu, DAY):
            bp = self._bp(point.average)
            if bp is not None and self.window.day_index(point.timestamp) is not None:
                out.setdefault(rid, []).append(bp)
        return out

    def _bp(self, value: float) -> int | None:
        try:
            return percent_to_bp(value)
        except ValueError:
            self.work.dropped += 1
            return None

    def _bytes(self, value: float, period: int) -> int | None:
        try:
            return self.names.net_bytes(value, period)
        except ValueError:
            self.work.dropped += 1
            return None

    def _query(self, ids: list[str], metric: str, period: int) -> list[tuple[str, MetricPoint]]:
        """One metric for a batch, fully read (retried as a whole) before any point is used."""
        d = self.d
        attempt = 0
        while True:
            attempt += 1
            self.work.queries += 1
            try:
                return list(self._points(ids, metric, period))
            except CloudError:
                if attempt >= d._read_attempts:
                    raise
                self.work.retries += 1
                d._sleep(d._retry_delay * 2 ** (attempt - 1))

    def _points(
        self, ids: list[str], metric: str, period: int
    ) -> Iterable[tuple[str, MetricPoint]]:
        w = self.window
        if isinstance(self.reader, MetricsBatchReader):
            return self.reader.get_metrics_many(
                self.region, ids, metric, start=w.start, end=w.end, period=period
            )
        reader = self.reader
        return (
            (rid, point)
            for rid in ids
            for point in reader.get_metrics(
                self.region, rid, metric, start=w.start, end=w.end, period=period
            )
        )

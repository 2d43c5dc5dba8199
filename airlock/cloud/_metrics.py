"""What every reader's metric reads share: one id is a batch of one, and a batch of many
ids is cut into the provider's query size. Private to :mod:`airlock.cloud`.

A reader subclasses :class:`BatchedMetrics`, names its batch size and implements
:meth:`BatchedMetrics._metric_batch` (one paged provider query over a batch); it then
offers both ``get_metrics`` (``CloudReader``) and ``get_metrics_many``
(``MetricsBatchReader``) with the same checks. It holds no I/O of its own.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from typing import ClassVar

from .ports import MetricPoint

__all__ = ["BatchedMetrics"]


class BatchedMetrics(ABC):
    """``get_metrics`` and ``get_metrics_many`` over one provider query per batch of ids."""

    #: How many resource ids one provider query takes.
    metric_batch: ClassVar[int]

    def get_metrics(
        self, region: str, resource_id: str, metric: str, *, start: int, end: int, period: int
    ) -> Iterator[MetricPoint]:
        """``resource_id``'s points of ``metric`` over ``[start, end)``, oldest first."""
        for _rid, point in self.get_metrics_many(
            region, [resource_id], metric, start=start, end=end, period=period
        ):
            yield point

    def get_metrics_many(
        self,
        region: str,
        resource_ids: Sequence[str],
        metric: str,
        *,
        start: int,
        end: int,
        period: int,
    ) -> Iterator[tuple[str, MetricPoint]]:
        """(id, point) pairs of ``metric`` over ``[start, end)`` for resources of one kind,
        one paged query per :attr:`metric_batch` ids; points within the window only.

        Raises:
            ValueError: an empty window, a period the provider cannot serve, a metric or
                id it does not know (before any query is sent).
            CloudError: the provider refused or did not answer.
        """
        if not resource_ids:
            return
        if end <= start or period <= 0:
            raise ValueError("need start < end and a positive period")
        self._check_metric_query(resource_ids, metric, period)
        for at in range(0, len(resource_ids), self.metric_batch):
            batch = resource_ids[at : at + self.metric_batch]
            for rid, point in self._metric_batch(
                region, batch, metric, start=start, end=end, period=period
            ):
                if start <= point.timestamp < end:
                    yield rid, point

    @abstractmethod
    def _check_metric_query(self, resource_ids: Sequence[str], metric: str, period: int) -> None:
        """Raise ValueError for a query the provider cannot serve."""

    @abstractmethod
    def _metric_batch(
        self,
        region: str,
        resource_ids: Sequence[str],
        metric: str,
        *,
        start: int,
        end: int,
        period: int,
    ) -> Iterator[tuple[str, MetricPoint]]:
        """One paged provider query over at most :attr:`metric_batch` ids."""

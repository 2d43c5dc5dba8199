"""devcloud's RPC actions: the Alibaba Cloud ECS, RDS and CloudMonitor subset Airlock uses.

:class:`Api` (1) authenticates a request (signature, date skew, nonce), (2) authorizes
its action against the key's scope like a RAM policy — the read key may only call
Describe*/List*/metrics, the write key may also stop and delete — and (3) runs the
action on the :class:`~services.devcloud.store.Store`, answering in Alibaba's shapes or
raising :class:`~services.devcloud.errors.AcsError` with Alibaba's code and status.
A write acts only on a resource of its region (see :mod:`services.devcloud.app`).
The HTTP route, fault injection and the error body are in :mod:`services.devcloud.app`.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Final

from fastapi import Request

from airlock.settings import DevcloudSettings

from .errors import AcsError
from .fleet import METRIC_KIND, datapoint
from .prices import (
    CURRENCY,
    ECS_HOURLY,
    RDS_ENGINES,
    RDS_HOURLY,
    RDS_STORAGE_GB_HOURLY,
    SYSTEM_DISK_HOURLY,
)
from .signing import parse_authorization, verify
from .store import Instance, Store
from .wire import Json, JsonObject

__all__ = ["REGION_HEADER", "Api", "first_header", "header_lists"]

_READ_ACTIONS: Final = frozenset(
    {
        ("ecs", "DescribeInstances"),
        ("ecs", "DescribePrice"),
        ("rds", "DescribeDBInstances"),
        ("rds", "DescribePrice"),
        ("rds", "ListTagResources"),
        ("cms", "DescribeMetricList"),
    }
)
_WRITE_ACTIONS: Final = frozenset(
    {
        ("ecs", "StopInstance"),
        ("ecs", "StopInstances"),
        ("ecs", "DeleteInstance"),
        ("ecs", "DeleteInstances"),
        ("rds", "StopDBInstance"),
    }
)
_STOPPED_MODES: Final = frozenset({"StopCharging", "KeepCharging"})
#: The region of the endpoint a request stands for (see the module docstring).
REGION_HEADER: Final = "x-acs-region-id"
_PAGE_MAX: Final = 100
_TAG_PAGE: Final = 50
_METRIC_PAGE_MAX: Final = 1440


def _bool(value: str | None) -> bool:
    return value is not None and value.lower() == "true"


def _int(params: dict[str, str], name: str, default: int, lo: int, hi: int) -> int:
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise AcsError(
            f"InvalidParameter.{name}", f"The parameter {name} is invalid.", 400
        ) from None
    if not lo <= value <= hi:
        raise AcsError(f"InvalidParameter.{name}", f"The parameter {name} is out of range.", 400)
    return value


def _required(params: dict[str, str], name: str) -> str:
    value = params.get(name)
    if not value:
        raise AcsError(f"MissingParameter.{name}", f"The input parameter {name} is mandatory.", 400)
    return value


def _write_region(params: dict[str, str], endpoint_region: str | None) -> str:
    """The region a write acts in: its ``RegionId``, else its endpoint's region."""
    region = params.get("RegionId") or endpoint_region
    if not region:
        raise AcsError(
            "MissingParameter.RegionId", "The input parameter RegionId is mandatory.", 400
        )
    return region


def _list(params: dict[str, str], prefix: str) -> list[str]:
    """``Prefix.1``, ``Prefix.2``, … as the SDK flattens a list."""
    out = []
    n = 1
    while f"{prefix}.{n}" in params:
        out.append(params[f"{prefix}.{n}"])
        n += 1
    return out


def _encode_token(*parts: object) -> str:
    raw = ":".join(str(p) for p in parts).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_token(token: str, *expect: str) -> list[str]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise AcsError("InvalidParameter.NextToken", "The NextToken is invalid.", 400) from None
    parts = raw.split(":")
    if len(parts) < len(expect) + 1 or parts[: len(expect)] != list(expect):
        raise AcsError("InvalidParameter.NextToken", "The NextToken is invalid.", 400)
    return parts[len(expect) :]


def _ecs_time(ts: int) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%MZ")


def _rds_time(ts: int) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ecs_json(inst: Instance) -> JsonObject:
    return {
        "InstanceId": inst.id,
        "InstanceName": inst.name,
        "HostName": inst.id,
        "RegionId": inst.region,
        "ZoneId": f"{inst.region}-a",
        "Status": inst.status,
        "InstanceType": inst.instance_type,
        "CreationTime": _ecs_time(inst.created_at),
        # The last start, to the minute like the real API: the agent tells from it whether
        # an instance Airlock stopped was started again since
        # (docs/architecture.md#staged-clean-up).
        "StartTime": _ecs_time(inst.started_at),
        "InstanceChargeType": "PostPaid",
        "StoppedMode": inst.stopped_mode or "Not-applicable",
        "Tags": {"Tag": [{"TagKey": k, "TagValue": v} for k, v in inst.tags]},
    }


def _rds_json(inst: Instance) -> JsonObject:
    engine, version = RDS_ENGINES.get(inst.instance_type, ("MySQL", "8.0"))
    return {
        "DBInstanceId": inst.id,
        "DBInstanceDescription": inst.name,
        "DBInstanceStatus": inst.status,
        "DBInstanceClass": inst.instance_type,
        "CreateTime": _rds_time(inst.created_at),
        "RegionId": inst.region,
        "ZoneId": f"{inst.region}-a",
        "Engine": engine,
        "EngineVersion": version,
        "DBInstanceStorageType": "cloud_essd",
        "PayType": "Postpaid",
        "LockMode": "Unlock",
    }


def _parse_time(raw: str | None, default: int) -> int:
    """CloudMonitor accepts Unix milliseconds or ``YYYY-MM-DD HH:MM:SS`` (read as UTC here)."""
    if raw is None or raw == "":
        return default
    if raw.isdigit():
        return int(raw) // 1000
    for fmt in ("%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%SZ"):
        try:
            return int(datetime.strptime(raw, fmt).replace(tzinfo=UTC).timestamp())
        except ValueError:
            continue
    raise AcsError("InvalidParameter.StartTime", f"The time {raw!r} is invalid.", 400)


def header_lists(raw: Iterable[tuple[bytes, bytes]]) -> dict[str, list[str]]:
    """A request's headers (ASGI ``scope["headers"]``) by lower-case name, every value
    received under each name in order, as Starlette's ``Headers.items()`` decodes them."""
    headers: dict[str, list[str]] = {}
    for name, value in raw:
        headers.setdefault(name.decode("latin-1").lower(), []).append(value.decode("latin-1"))
    return headers


def first_header(headers: Mapping[str, Sequence[str]], name: str) -> str:
    """The first value of header ``name``, as ``Headers.get(name, "")`` answers; "" if none."""
    values = headers.get(name)
    return values[0] if values else ""


def _url_path(path: str) -> str:
    """The path of the request's URL as Starlette's ``request.url.path`` gives it, without
    building the whole URL (the characters a URL would take for its query, fragment or a
    separator are escaped)."""
    return path.replace("?", "%3F").replace("#", "%23").replace("\\", "%5C")


# x-acs-date as the SDK writes it (zero-padded fields), read without strptime, which costs
# several times as much; every other text goes to strptime, which decides.
_PLAIN_DATE: Final = re.compile(
    r"([1-9][0-9]{3})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})Z"
)


def _signed_at(date: str) -> float:
    """Unix seconds of ``x-acs-date`` (``%Y-%m-%dT%H:%M:%SZ``, UTC); raises
    ``InvalidTimeStamp.Format`` when strptime would not read it."""
    plain = _PLAIN_DATE.fullmatch(date)
    if plain is not None:
        try:  # the calendar date and the time of day, as strptime checks them
            year, month, day, hour, minute, second = map(int, plain.groups())
            return datetime(year, month, day, hour, minute, second, tzinfo=UTC).timestamp()
        except ValueError:
            pass  # strptime below decides
    try:
        return datetime.strptime(date, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        raise AcsError("InvalidTimeStamp.Format", "Specified time stamp is invalid.", 400) from None


class Api:
    """The RPC actions over one store, for the two keys of ``settings``."""

    def __init__(
        self, settings: DevcloudSettings, store: Store, clock: Callable[[], float]
    ) -> None:
        self.settings = settings
        self.store = store
        self.clock = clock
        self.keys = {
            settings.read_key_id: ("read", settings.read_key_secret.get_secret_value()),
            settings.write_key_id: ("write", settings.write_key_secret.get_secret_value()),
        }

    # -- authentication and authorization

    def authenticate(
        self, request: Request, body: bytes, headers: Mapping[str, Sequence[str]]
    ) -> tuple[str, str]:
        """Step (1): the signature, the date skew and the nonce; the key's id and scope.

        ``headers`` maps lower-case names to every value received under that name
        (:func:`header_lists`).
        """
        auth = parse_authorization(first_header(headers, "authorization") or None)
        key = self.keys.get(auth.access_key_id)
        if key is None:
            raise AcsError("InvalidAccessKeyId.NotFound", "Specified access key is not found.", 404)
        scope, secret = key
        verify(
            method=request.method,
            path=_url_path(request.scope["path"]),
            query=list(request.query_params.multi_items()),
            headers=headers,
            body=body,
            auth=auth,
            secret=secret,
        )
        signed_at = _signed_at(first_header(headers, "x-acs-date"))
        if abs(self.clock() - signed_at) > self.settings.max_clock_skew:
            raise AcsError(
                "InvalidTimeStamp.Expired", "Specified time stamp or date value is expired.", 400
            )
        nonce = first_header(headers, "x-acs-signature-nonce")
        if not nonce or not self.store.use_nonce(nonce, self.settings.max_clock_skew):
            raise AcsError("SignatureNonceUsed", "Specified signature nonce was used already.", 400)
        return auth.access_key_id, scope

    @staticmethod
    def authorize(scope: str, product: str, action: str) -> bool:
        """True for a write action. Raises Forbidden.RAM outside the key's policy."""
        is_write = (product, action) in _WRITE_ACTIONS
        allowed = (product, action) in _READ_ACTIONS or (is_write and scope == "write")
        if not allowed:
            raise AcsError(
                "Forbidden.RAM",
                "User not authorized to operate on the specified resource, or this API"
                " doesn't support RAM.",
                403,
            )
        return is_write

    # -- dispatch

    def dispatch(
        self,
        product: str,
        action: str,
        params: dict[str, str],
        key_id: str,
        request_id: str,
        *,
        endpoint_region: str | None = None,
    ) -> JsonObject:
        handler = getattr(self, f"_{product}_{action}")
        if (product, action) in _WRITE_ACTIONS:
            result: JsonObject = handler(params, key_id, request_id, endpoint_region)
        else:
            result = handler(params, key_id, request_id)
        result.setdefault("RequestId", request_id)
        return result

    # ECS

    def _ecs_DescribeInstances(self, p: dict[str, str], _k: str, _r: str) -> JsonObject:
        region = _required(p, "RegionId")
        ids = None
        if p.get("InstanceIds"):
            try:
                ids = json.loads(p["InstanceIds"])
            except ValueError:
                raise AcsError(
                    "InvalidInstanceIds.Malformed", "InstanceIds is malformed.", 400
                ) from None
            if (
                not isinstance(ids, list)
                or not all(isinstance(i, str) for i in ids)
                or len(ids) > 100
            ):
                raise AcsError("InvalidInstanceIds.Malformed", "InstanceIds is malformed.", 400)
        tags: list[tuple[str, str | None]] = []
        n = 1
        while f"Tag.{n}.Key" in p:
            tags.append((p[f"Tag.{n}.Key"], p.get(f"Tag.{n}.Value")))
            n += 1
        status = p.get("Status") or None
        return self._page(
            "ecs",
            region,
            p,
            ids=ids,
            status=status,
            tags=tags,
            default_size=10,
            render=_ecs_json,
            list_key=("Instances", "Instance"),
            total_key="TotalCount",
        )

    def _page(
        self,
        kind: str,
        region: str,
        p: dict[str, str],
        *,
        ids: list[str] | None,
        status: str | None,
        tags: list[tuple[str, str | None]],
        default_size: int,
        render: Callable[[Instance], JsonObject],
        list_key: tuple[str, str],
        total_key: str,
    ) -> JsonObject:
        token_mode = "NextToken" in p or "MaxResults" in p
        if token_mode:
            size = _int(p, "MaxResults", default_size, 1, _PAGE_MAX)
            after = int(_decode_token(p["NextToken"], kind, region)[0]) if p.get("NextToken") else 0
            rows, total = self.store.page(
                kind,
                region,
                after=after,
                offset=0,
                limit=size + 1,
                ids=ids,
                status=status,
                tags=tags,
            )
            more = len(rows) > size
            rows = rows[:size]
            body: JsonObject = {
                total_key: total,
                "NextToken": _encode_token(kind, region, rows[-1].ord) if more else "",
            }
            if kind == "ecs":
                body["MaxResults"] = size
        else:
            size = _int(p, "PageSize", default_size, 1, _PAGE_MAX)
            number = _int(p, "PageNumber", 1, 1, 10**9)
            rows, total = self.store.page(
                kind,
                region,
                after=0,
                offset=(number - 1) * size,
                limit=size,
                ids=ids,
                status=status,
                tags=tags,
            )
            body = {total_key: total, "PageNumber": number}
            body["PageSize" if kind == "ecs" else "PageRecordCount"] = (
                size if kind == "ecs" else len(rows)
            )
        body[list_key[0]] = {list_key[1]: [render(i) for i in rows]}
        return body

    def _stop_ecs(
        self,
        ids: list[str],
        p: dict[str, str],
        *,
        key: str,
        rid: str,
        action: str,
        region: str,
    ) -> list[Instance]:
        mode = p.get("StoppedMode") or None
        if mode is not None and mode not in _STOPPED_MODES:
            raise AcsError(
                "InvalidParameter.StoppedMode", "The specified StoppedMode is invalid.", 400
            )
        return self.store.stop(
            kind="ecs",
            instance_ids=ids,
            region=region,
            stopped_mode=mode,
            action=action,
            request_id=rid,
            key_id=key,
            params=p,
            dry_run=_bool(p.get("DryRun")),
        )

    def _ecs_StopInstance(
        self, p: dict[str, str], key: str, rid: str, endpoint_region: str | None
    ) -> JsonObject:
        iid = _required(p, "InstanceId")
        region = _write_region(p, endpoint_region)
        self._stop_ecs([iid], p, key=key, rid=rid, action="StopInstance", region=region)
        return {}

    def _ecs_StopInstances(
        self, p: dict[str, str], key: str, rid: str, _endpoint_region: str | None
    ) -> JsonObject:
        region = _required(p, "RegionId")
        ids = _list(p, "InstanceId")
        if not 1 <= len(ids) <= 100:
            raise AcsError("MissingParameter.InstanceIds", "InstanceId.N is mandatory.", 400)
        before = self._stop_ecs(ids, p, key=key, rid=rid, action="StopInstances", region=region)
        return {
            "InstanceResponses": {
                "InstanceResponse": [
                    {
                        "InstanceId": i.id,
                        "Code": "200",
                        "Message": "success",
                        "PreviousStatus": i.status,
                        "CurrentStatus": "Stopping",
                    }
                    for i in before
                ]
            }
        }

    def _ecs_DeleteInstance(
        self, p: dict[str, str], key: str, rid: str, endpoint_region: str | None
    ) -> JsonObject:
        iid = _required(p, "InstanceId")
        body, _ = self.store.delete_ecs(
            region=_write_region(p, endpoint_region),
            instance_ids=[iid],
            force=_bool(p.get("Force")),
            client_token=None,
            action="DeleteInstance",
            request_id=rid,
            key_id=key,
            params=p,
            dry_run=_bool(p.get("DryRun")),
        )
        return body

    def _ecs_DeleteInstances(
        self, p: dict[str, str], key: str, rid: str, _endpoint_region: str | None
    ) -> JsonObject:
        region = _required(p, "RegionId")
        ids = _list(p, "InstanceId")
        if not 1 <= len(ids) <= 100:
            raise AcsError("MissingParameter.InstanceId", "InstanceId.N is mandatory.", 400)
        token = p.get("ClientToken") or None
        if token is not None and (len(token) > 64 or not token.isascii()):
            raise AcsError("InvalidParameter.ClientToken", "The ClientToken is invalid.", 400)
        body, _replayed = self.store.delete_ecs(
            region=region,
            instance_ids=ids,
            force=_bool(p.get("Force")),
            client_token=token,
            action="DeleteInstances",
            request_id=rid,
            key_id=key,
            params=p,
            dry_run=_bool(p.get("DryRun")),
        )
        return body

    # RDS

    def _rds_DescribeDBInstances(self, p: dict[str, str], _k: str, _r: str) -> JsonObject:
        region = _required(p, "RegionId")
        ids = [i for i in p["DBInstanceId"].split(",") if i] if p.get("DBInstanceId") else None
        return self._page(
            "rds",
            region,
            p,
            ids=ids,
            status=p.get("DBInstanceStatus") or None,
            tags=[],
            default_size=30,
            render=_rds_json,
            list_key=("Items", "DBInstance"),
            total_key="TotalRecordCount",
        )

    def _rds_ListTagResources(self, p: dict[str, str], _k: str, _r: str) -> JsonObject:
        region = _required(p, "RegionId")
        if p.get("ResourceType", "").upper() != "INSTANCE":
            raise AcsError("InvalidParameter.ResourceType", "ResourceType must be INSTANCE.", 400)
        ids = _list(p, "ResourceId")
        if not 1 <= len(ids) <= 50:
            raise AcsError("InvalidParameter.ResourceId", "ResourceId.N takes 1 to 50 ids.", 400)
        found = self.store.get(ids)
        entries: list[Json] = [
            {"ResourceId": iid, "ResourceType": "ALIYUN::RDS::INSTANCE", "TagKey": k, "TagValue": v}
            for iid in ids
            if iid in found and found[iid].kind == "rds" and found[iid].region == region
            for k, v in found[iid].tags
        ]
        start = int(_decode_token(p["NextToken"], "tags")[0]) if p.get("NextToken") else 0
        page = entries[start : start + _TAG_PAGE]
        more = start + _TAG_PAGE < len(entries)
        body: JsonObject = {"TagResources": {"TagResource": page}}
        if more:
            body["NextToken"] = _encode_token("tags", start + _TAG_PAGE)
        return body

    def _rds_StopDBInstance(
        self, p: dict[str, str], key: str, rid: str, endpoint_region: str | None
    ) -> JsonObject:
        iid = _required(p, "DBInstanceId")
        self.store.stop(
            kind="rds",
            instance_ids=[iid],
            region=_write_region(p, endpoint_region),
            stopped_mode=None,
            action="StopDBInstance",
            request_id=rid,
            key_id=key,
            params=p,
        )
        return {"DBInstanceId": iid}

    def _ecs_DescribePrice(self, p: dict[str, str], _k: str, _r: str) -> JsonObject:
        """Pay-as-you-go price of one instance type, per hour (``PriceUnit=Hour``).

        The answer has the real API's shape: ``PriceInfo.Price`` totals the instance type
        and its default system disk, and ``DetailInfos`` prices each resource apart.
        """
        _required(p, "RegionId")
        if p.get("ResourceType", "instance") != "instance":
            raise AcsError("InvalidParameter.ResourceType", "devcloud prices instances only.", 400)
        if p.get("PriceUnit", "Hour") != "Hour":
            raise AcsError(
                "InvalidPriceUnit.ValueNotSupported", "devcloud quotes PriceUnit=Hour only.", 400
            )
        _int(p, "Period", 1, 1, 1)  # an hourly price is quoted for one hour
        instance_type = _required(p, "InstanceType")
        hourly = ECS_HOURLY.get(instance_type)
        if hourly is None:
            raise AcsError(
                "InvalidInstanceType.ValueNotSupported",
                "The specified InstanceType does not exist or is not supported.",
                400,
            )
        details = [("instanceType", float(hourly)), ("systemDisk", float(SYSTEM_DISK_HOURLY))]
        total = round(sum(price for _, price in details), 4)
        return {
            "PriceInfo": {
                "Price": {
                    "Currency": CURRENCY,
                    "OriginalPrice": total,
                    "DiscountPrice": 0.0,
                    "TradePrice": total,
                    "DetailInfos": {
                        "DetailInfo": [
                            {
                                "Resource": name,
                                "OriginalPrice": price,
                                "DiscountPrice": 0.0,
                                "TradePrice": price,
                            }
                            for name, price in details
                        ]
                    },
                },
                "Rules": {"Rule": []},
            }
        }

    def _rds_DescribePrice(self, p: dict[str, str], _k: str, _r: str) -> JsonObject:
        """Pay-as-you-go price per hour of one RDS class with ``DBInstanceStorage`` GB.

        The answer has the real API's shape: ``PriceInfo`` quotes the class and its
        storage together, in ``Currency``, and does not split them.
        """
        _required(p, "RegionId")
        engine = _required(p, "Engine")
        version = _required(p, "EngineVersion")
        rds_class = _required(p, "DBInstanceClass")
        storage = _int(p, "DBInstanceStorage", 0, 5, 64000)
        if storage == 0:
            raise AcsError(
                "MissingParameter.DBInstanceStorage",
                "The input parameter DBInstanceStorage is mandatory.",
                400,
            )
        _int(p, "Quantity", 1, 1, 30)
        if p.get("PayType") != "Postpaid":
            raise AcsError(
                "InvalidPayType.ValueNotSupported", "devcloud quotes PayType=Postpaid only.", 400
            )
        hourly = RDS_HOURLY.get(rds_class)
        if hourly is None or RDS_ENGINES[rds_class] != (engine, version):
            raise AcsError(
                "InvalidDBInstanceClass.NotFound",
                "The specified DBInstanceClass is not found for this engine and version.",
                400,
            )
        total = float(Decimal(hourly) + Decimal(RDS_STORAGE_GB_HOURLY) * storage)
        return {
            "PriceInfo": {
                "Currency": CURRENCY,
                "OriginalPrice": total,
                "DiscountPrice": 0.0,
                "TradePrice": total,
                "RuleIds": {"RuleId": []},
                "Coupons": {"Coupon": []},
            },
            "Rules": {"Rule": []},
            "ShowDiscount": False,
        }

    # CloudMonitor

    def _cms_DescribeMetricList(self, p: dict[str, str], _k: str, _r: str) -> JsonObject:
        namespace = _required(p, "Namespace")
        metric = _required(p, "MetricName")
        kind_scale = METRIC_KIND.get((namespace, metric))
        if kind_scale is None:
            raise AcsError(
                "InvalidParameter", f"Metric {namespace}/{metric} is not supported.", 400
            )
        kind, scale = kind_scale
        period = _int(p, "Period", 60, 60, 30 * 86_400)
        if period % 60:
            raise AcsError("InvalidParameter.Period", "Period must be a multiple of 60.", 400)
        length = _int(p, "Length", 1000, 1, _METRIC_PAGE_MAX)
        now = int(self.clock())
        end = _parse_time(p.get("EndTime"), now)
        start = _parse_time(p.get("StartTime"), end - 3600)
        try:
            dims = json.loads(p.get("Dimensions") or "[]")
        except ValueError:
            raise AcsError(
                "InvalidParameter.Dimensions", "Dimensions is not valid JSON.", 400
            ) from None
        if isinstance(dims, dict):
            dims = [dims]
        if not isinstance(dims, list) or not all(
            isinstance(d, dict) and isinstance(d.get("instanceId"), str) for d in dims
        ):
            raise AcsError("InvalidParameter.Dimensions", "Dimensions needs instanceId.", 400)
        ids = [d["instanceId"] for d in dims]
        found = self.store.get(ids)
        seed = int(self.store.get_meta("seed", "0"))
        # Each instance's series is [first aligned period at or after creation, end).
        spans: list[tuple[Instance, int, int]] = []
        for iid in ids:
            inst = found.get(iid)
            if inst is None or inst.profile == "none" or (kind == "mem" and not inst.has_memory):
                continue
            first = max(start, inst.created_at)
            first = first + (-first) % period
            count = max(0, math.ceil((end - first) / period))
            if count:
                spans.append((inst, first, count))
        offset = int(_decode_token(p["NextToken"], "m")[0]) if p.get("NextToken") else 0
        points: list[JsonObject] = []
        skip = offset
        for inst, first, count in spans:
            if skip >= count:
                skip -= count
                continue
            for n in range(skip, count):
                if len(points) == length:
                    break
                t = first + n * period
                avg, peak = datapoint(
                    seed=seed,
                    instance_id=inst.id,
                    profile=inst.profile,
                    kind=kind,
                    scale=scale,
                    t=t,
                    period=period,
                )
                points.append(
                    {
                        "timestamp": t * 1000,
                        "userId": self.settings.account,
                        "instanceId": inst.id,
                        "Minimum": round(avg * 0.5, 2),
                        "Average": avg,
                        "Maximum": peak,
                    }
                )
            skip = 0
            if len(points) == length:
                break
        total = sum(c for _, _, c in spans)
        body: JsonObject = {
            "Code": "200",
            "Success": True,
            "Period": str(period),
            # The real API returns Datapoints as a JSON string, not an array.
            "Datapoints": json.dumps(points, separators=(",", ":")),
        }
        if offset + len(points) < total:
            body["NextToken"] = _encode_token("m", offset + len(points))
        return body

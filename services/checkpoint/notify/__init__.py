"""Notifications: people hear about what waits for them (docs/notifications.md).

An event is written to the outbox (:mod:`.outbox`) in the transaction of the state
change it tells of; the delivery worker (:mod:`.worker`), a thread of the checkpoint,
sends it through the channels the policy's ``[notify]`` table names (:mod:`.config`):
webhooks signed per Standard Webhooks, Slack incoming webhooks, SMTP with STARTTLS
(:mod:`.channels`). Delivery is at least once, with a stable event id.

A notification is news, never authority: it carries no approval, signature, receipt,
token or secret (:mod:`.events` names every field it carries), and nothing here can
change a proposal.
"""

from __future__ import annotations

from .channels import DeliveryError, Sender, email_message, open_channels, slack_message
from .config import Channel, NotifyConfig, parse_notify
from .events import sample_body
from .outbox import Delivery, Outbox, OutboxStats, record
from .worker import Dispatcher, NotifyMetrics

__all__ = [
    "Channel",
    "Delivery",
    "DeliveryError",
    "Dispatcher",
    "NotifyConfig",
    "NotifyMetrics",
    "Outbox",
    "OutboxStats",
    "Sender",
    "email_message",
    "open_channels",
    "parse_notify",
    "record",
    "sample_body",
    "slack_message",
]

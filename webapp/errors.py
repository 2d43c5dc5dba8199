"""The web app's one error tree, and the human message for each checkpoint refusal code.

Error hierarchy::

    WebappError                 root of everything the web app raises on purpose
    ├── CheckpointRefused       the checkpoint answered with {"error": {"code", "message"}}
    └── CheckpointUnavailable   the checkpoint could not be reached or answered nonsense

The two checkpoint errors are also :mod:`airlock.apiclient`'s, whose core the web app's
client wraps.

The checkpoint is the judge of every decision; these messages only explain its verdicts
to a person. A message never repeats text that came from the cloud or the agent.
"""

from __future__ import annotations

from typing import Final

from airlock import apiclient

__all__ = [
    "SIGN_IN_REFUSED",
    "CheckpointRefused",
    "CheckpointUnavailable",
    "WebappError",
    "human_message",
]


class WebappError(Exception):
    """Root of every error the web app raises on purpose."""


class CheckpointRefused(WebappError, apiclient.CheckpointRefused):
    """A refusal from the checkpoint, with its stable code (``code``, ``message``,
    ``status``, ``retry_after``)."""


class CheckpointUnavailable(WebappError, apiclient.CheckpointUnavailable):
    """The checkpoint did not answer, or answered something that is not its API."""


#: One sentence per code saying what happened and what to do next. Nothing was changed
#: by a refused request, and the messages say so where a person might worry.
_MESSAGES: Final = {
    "E_STALE_VIEW": "The action changed after you opened this page, so nothing was "
    "approved. Review the current version below and approve again if it is still right.",
    "E_CONFIRM_REQUIRED": "This is a high-risk action: type the resource id in the "
    "confirmation box to approve it.",
    "E_CONFIRM_MISMATCH": "The resource id you typed does not match this resource, so "
    "nothing was approved. Check the id and type it again.",
    "E_NOTE_REQUIRED": "Rejecting for “Other” needs a note saying why, so nothing was "
    "rejected. Write the reason in the note and reject again.",
    "E_SELF_APPROVAL": "You proposed this action, so you may not approve it: someone else has to.",
    "E_ALREADY_VOTED": "You have already approved this. It is waiting for another person.",
    "E_EXPIRED": "The approval window has closed, so this proposal can no longer be "
    "approved. The agent will propose it again if the resource is still idle.",
    "E_STATE": "This proposal is no longer in a state that allows that — someone may have "
    "decided it meanwhile. Its current state is shown below.",
    "E_FORBIDDEN": "Your role, or the groups this proposal is routed to, do not allow this action.",
    "E_UNAUTHENTICATED": "Your session has ended. Please sign in again.",
    "E_NOT_FOUND": "There is no such proposal (it may have been removed, or the link is wrong).",
    "E_INVALID": "The checkpoint could not accept this request as sent (a note may be too "
    "long). Nothing was changed.",
    "E_NO_SIGNING_KEY": "The checkpoint has no active signing key, so it cannot issue "
    "approvals right now. An administrator must rotate in a new key.",
    "E_POLICY_DENIED": "The policy forbids this action outright.",
    "E_CONFLICT": "This proposal conflicts with another version of itself.",
    "E_DUPLICATE_OPEN": "Another open proposal already exists for this resource and operation.",
    "E_RECEIPT": "The executor's receipt did not verify.",
    "E_RESOLUTION_CONFLICT": "The executor's ledger resolved this in-doubt write "
    "otherwise than the checkpoint records: check the resource in the cloud and both records.",
    "E_BUSY": "The checkpoint is busy with many sign-ins at once. Wait a few seconds and "
    "sign in again.",
    "E_HOST": "The checkpoint does not answer to the name this web app calls it by: "
    "an administrator must add it to the checkpoint's allowed host names.",
    "E_RATE_LIMITED": "Too many of your requests were refused in a short time. Wait a minute "
    "and try again. Nothing was changed.",
    "E_THROTTLED": "Too many failed sign-ins from your address. Wait a while, then sign in again.",
    "E_WEAK_PASSWORD": "That password is too short or too common; nothing was changed.",
}


#: The sign-in page's answer to a refused sign-in. The checkpoint answers an unknown
#: name, a wrong password and a locked account alike (so that no one can learn which
#: names exist); this names the lock so a locked-out person knows what to do.
SIGN_IN_REFUSED: Final = (
    "Wrong username or password, or the account is locked after failed sign-ins from many "
    "places: an administrator can unlock it."
)


def human_message(code: str) -> str:
    """What a person should read for ``code``; unknown codes are named, never hidden."""
    fallback = f"The checkpoint refused this request ({code}). Nothing was changed."
    return _MESSAGES.get(code, fallback)

"""What every SQS action group shares: the request (``Call``) and the server's context (the
connected ``Casque``, the SQS settings, queue URLs and ARNs)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from daemon.base.config import SqsSettings
from daemon.engine.access.access_keys import AccessKey
from daemon.engine.client import Casque
from daemon.http.sqs import attributes as qattr
from daemon.http.sqs import params
from daemon.http.sqs.errors import SqsError, missing


@dataclass
class Call:
    """One request: its parameters, the base URL queue URLs are built on, who signed it (None
    when the endpoint runs without authentication), and where it came from (the policy
    conditions' aws:SourceIp and aws:SecureTransport; daemon/http/sqs/access.py)."""

    params: dict[str, Any]
    base_url: str
    path_queue: str | None = None
    principal: AccessKey | None = None
    trace_header: str | None = None  # X-Amzn-Trace-Id: SQS keeps it as the message's AWSTraceHeader
    source_ip: str = field(default="", kw_only=True)  # keyword-only: positional fields added by others keep their place
    secure: bool = field(default=False, kw_only=True)


class ActionGroup:
    """A set of SQS actions acting on one kind of thing (queues, messages, move tasks,
    permissions). ``ACTIONS`` names them; each is the method of the same name in snake case."""

    ACTIONS: tuple[str, ...] = ()

    def __init__(self, cq: Casque, settings: SqsSettings) -> None:
        self.cq = cq
        self.settings = settings

    def url(self, call: Call, queue: str) -> str:
        return f"{call.base_url}/{self.settings.account}/{queue}"

    def arn(self, queue: str) -> str:
        return qattr.arn(self.settings.region, self.settings.account, queue)

    def queue_of(self, call: Call) -> str:
        url = call.params.get("QueueUrl") or call.path_queue
        if not url:
            raise missing("QueueUrl")
        name = str(url).rstrip("/").rsplit("/", 1)[-1]
        if not params.QUEUE_NAME.match(name):
            raise SqsError("QueueDoesNotExist", "The specified queue does not exist.")
        return name

"""SQS queue attributes <-> casque queue settings.

VisibilityTimeout is the queue's message timeout, MessageRetentionPeriod its retention, and a
RedrivePolicy's maxReceiveCount its max_attempts (without one, 0: no limit, as in SQS a message is
received again until its retention ends). Messages sent over SQS store max_attempts 0, "follow the
queue": the policy as it is when a message is received decides (engine/consume/consumer.py), so a policy
set, lowered or removed after the send applies to it, as in SQS. The rest (DelaySeconds, ReceiveMessageWaitTimeSeconds,
MaximumMessageSize, RedrivePolicy itself, Policy, ...) is kept as text in the queue row's
``attributes`` map (engine/queues/attributes.py). Each value is checked against SQS's range first; a
Policy must be one casque can enforce (policy.py), as it is on every request (access.py).
"""

from __future__ import annotations

import json
import re
from typing import Any

from daemon.base.model import QueueSettings
from daemon.engine.delivery.deadletter import DEAD_LETTER
from daemon.engine.queues.attributes import QueueExtras
from daemon.http.sqs import fifo as fifo_rules
from daemon.http.sqs.errors import SqsError
from daemon.http.sqs.params import QUEUE_NAME
from daemon.http.sqs.policy import compile_policy

NO_REDRIVE_ATTEMPTS = 0  # the queue's max_attempts without a RedrivePolicy: no limit
FOLLOW_QUEUE = 0  # a message's max_attempts: the queue's, as it is at each receive
MAX_RECEIVE_COUNT = 1000
DEFAULT_VISIBILITY = 30
DEFAULT_RETENTION = 345_600
#: SQS's largest message, and largest SendMessageBatch (the sum of its messages), since 2025-08
#: (it was 256 KiB): the API reference's SendMessageBatch, "both 1 MiB 1,048,576 bytes".
SERVICE_MAX_SIZE = 1_048_576
DEFAULT_MAX_SIZE = SERVICE_MAX_SIZE  # a queue's MaximumMessageSize when not set
RANGES = {
    "DelaySeconds": (0, 900),
    "MaximumMessageSize": (1024, SERVICE_MAX_SIZE),
    "MessageRetentionPeriod": (60, 1_209_600),
    "ReceiveMessageWaitTimeSeconds": (0, 20),
    "VisibilityTimeout": (0, 43_200),
    "KmsDataKeyReusePeriodSeconds": (60, 86_400),
}
DEFAULTS = {"DelaySeconds": "0", "MaximumMessageSize": str(DEFAULT_MAX_SIZE), "ReceiveMessageWaitTimeSeconds": "0"}
STORED_AS_IS = {"Policy", "RedriveAllowPolicy", "KmsMasterKeyId", "SqsManagedSseEnabled"}
#: Server-side encryption, as AWS answers it (recorded by LocalStack's aws-validated test_sse_queue_attributes,
#: test_set_queue_attributes_default_values, test_sse_kms_and_sqs_are_mutually_exclusive): a queue is SSE-SQS
#: (SqsManagedSseEnabled "true") unless made otherwise, AWS's default since 2022-10; a KmsMasterKeyId makes
#: it SSE-KMS ("false"), and removing the key leaves it "false"; KmsDataKeyReusePeriodSeconds is shown
#: only with a key (default 300). casque encrypts nothing: these are kept and returned, no more.
KMS_REUSE_DEFAULT = "300"
SSE_BOTH = "You can use one type of server-side encryption (SSE) at one time. You can either enable KMS SSE or SQS SSE."
FIFO_ONLY = set(fifo_rules.ATTRIBUTES)  # queue settings of a FIFO queue (fifo.py), refused on a standard one
COUNTS = {"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed"}
READ_ONLY = COUNTS | {"CreatedTimestamp", "LastModifiedTimestamp", "QueueArn"}
SETTABLE = set(RANGES) | STORED_AS_IS | {"RedrivePolicy"}
_ARN = re.compile(r"^arn:aws[a-z-]*:sqs:[a-z0-9-]+:[0-9]{12}:([A-Za-z0-9_.-]{1,80})$")


def arn(region: str, account: str, queue: str) -> str:
    return f"arn:aws:sqs:{region}:{account}:{queue}"


def queue_of_arn(value: Any) -> str | None:
    m = _ARN.match(value) if isinstance(value, str) else None
    return m.group(1) if m and QUEUE_NAME.match(m.group(1)) else None


def check(attrs: Any, fifo: bool = False, queue_arn: str | None = None) -> dict[str, str]:
    """Validate attributes to set on a queue (``fifo``: a FIFO one; ``queue_arn``: its ARN, which
    says which statements of a Policy can apply to it: policy.py); returns them as text. The FIFO
    attributes are checked by fifo.py: refused on a standard queue, as SQS does."""
    if attrs is None:
        return {}
    if not isinstance(attrs, dict):
        raise SqsError("InvalidParameterValue", "Attributes must be a map of attribute name to value.")
    out: dict[str, str] = {}
    for raw_name, value in attrs.items():
        name = str(raw_name).strip()  # SQS ignores surrounding spaces in attribute names
        text = str(value).lower() if isinstance(value, bool) else str(value)
        if name in FIFO_ONLY:
            out[name] = fifo_rules.check_attribute(name, text, fifo)
            continue
        if name not in SETTABLE:
            raise SqsError("InvalidAttributeName", f"Unknown Attribute {name}.")
        if name in RANGES:
            lo, hi = RANGES[name]
            if not text.isdigit() or not lo <= int(text) <= hi:
                raise SqsError(
                    "InvalidAttributeValue",
                    f"Invalid value for the parameter {name}: must be an integer from {lo} to {hi}.",
                )
            text = str(int(text))
        if name == "SqsManagedSseEnabled" and text.lower() in ("true", "false"):
            text = text.lower()
        elif name == "SqsManagedSseEnabled" and text:
            raise SqsError(
                "InvalidAttributeValue", "Invalid value for the parameter SqsManagedSseEnabled: must be true or false."
            )
        if name == "RedrivePolicy" and text:
            text = _redrive(text)
        if name == "Policy" and text:
            compile_policy(text, queue_arn)  # refused unless casque can enforce it (access.py); kept as given
        out[name] = text
    return out


def encryption(attrs: dict[str, str], current: dict[str, str]) -> dict[str, str]:
    """The encryption attributes to write, given a queue's ``current`` ones: one kind of SSE at a
    time (AWS's InvalidAttributeName when a request would leave a queue with a KMS key and
    SqsManagedSseEnabled true), and a KMS key set turns SqsManagedSseEnabled to "false", as AWS does."""
    key = attrs.get("KmsMasterKeyId", current.get("KmsMasterKeyId", ""))
    if attrs.get("SqsManagedSseEnabled") == "true" and key:
        raise SqsError("InvalidAttributeName", SSE_BOTH)
    if attrs.get("KmsMasterKeyId") and "SqsManagedSseEnabled" not in attrs:
        return attrs | {"SqsManagedSseEnabled": "false"}
    return attrs


def _redrive(text: str) -> str:
    try:
        policy = json.loads(text)
    except ValueError:
        raise SqsError(
            "InvalidAttributeValue",
            "Value for parameter RedrivePolicy is invalid. Reason: Redrive policy is not a valid JSON map.",
        ) from None
    if not isinstance(policy, dict) or queue_of_arn(policy.get("deadLetterTargetArn")) is None:
        raise SqsError(
            "InvalidAttributeValue",
            "Value for parameter RedrivePolicy is invalid. Reason: Invalid value for deadLetterTargetArn.",
        )
    count: Any = policy.get("maxReceiveCount")  # anything JSON holds: int() below refuses what is no count
    try:
        n = int(count)
    except (TypeError, ValueError):
        n = 0
    if not 1 <= n <= MAX_RECEIVE_COUNT:
        raise SqsError(
            "InvalidAttributeValue",
            f"Value for parameter RedrivePolicy is invalid. Reason: Invalid value for maxReceiveCount: {count}, valid "
            "values are from 1 to 1000 both inclusive.",
        )
    return json.dumps(
        {"deadLetterTargetArn": policy["deadLetterTargetArn"], "maxReceiveCount": n}, separators=(",", ":")
    )


def casque_options(attrs: dict[str, str]) -> dict[str, Any]:
    """The casque settings these SQS attributes imply (for create and update)."""
    out: dict[str, Any] = {}
    if "VisibilityTimeout" in attrs:
        out["timeout"] = max(0.1, int(attrs["VisibilityTimeout"]))
    if "MessageRetentionPeriod" in attrs:
        out["retention"] = int(attrs["MessageRetentionPeriod"])
    if "RedrivePolicy" in attrs:
        out["max_attempts"] = (
            json.loads(attrs["RedrivePolicy"])["maxReceiveCount"] if attrs["RedrivePolicy"] else NO_REDRIVE_ATTEMPTS
        )
    return out | fifo_rules.options(attrs)


def stored(attrs: dict[str, str]) -> dict[str, str]:
    """The attributes kept as text in the queue row's map: all but the FIFO ones (queue settings)."""
    return {k: v for k, v in attrs.items() if k not in FIFO_ONLY}


def number(qs: QueueSettings, extras: QueueExtras, name: str) -> int:
    """A numeric attribute's current value."""
    if name == "VisibilityTimeout":
        return qs.timeout_ms // 1000
    if name == "MessageRetentionPeriod":
        return qs.retention_s
    return int(extras.attributes.get(name, DEFAULTS.get(name, "0")))


def describe(qs: QueueSettings, extras: QueueExtras, queue_arn: str) -> dict[str, str]:
    """Every attribute but the counts (which cost reads): the GetQueueAttributes answer."""
    out = {k: v for k, v in extras.attributes.items() if v != "" and not k.startswith("casque.")}
    for name in (
        "VisibilityTimeout",
        "MessageRetentionPeriod",
        "DelaySeconds",
        "MaximumMessageSize",
        "ReceiveMessageWaitTimeSeconds",
    ):
        out[name] = str(number(qs, extras, name))
    out["QueueArn"] = queue_arn
    out["CreatedTimestamp"] = str(extras.created_at // 1000)
    out["LastModifiedTimestamp"] = str(extras.updated_at // 1000)
    key = out.get("KmsMasterKeyId")
    if key:
        out.setdefault("KmsDataKeyReusePeriodSeconds", KMS_REUSE_DEFAULT)
    else:
        out.pop("KmsDataKeyReusePeriodSeconds", None)
    out.setdefault("SqsManagedSseEnabled", "false" if key else "true")
    return out | fifo_rules.describe(qs)


def internal(attrs: dict[str, str]) -> tuple[dict[str, str], set[str]]:
    """casque's own attributes implied by SQS ones: a RedrivePolicy names the dead-letter queue
    that engine/delivery/deadletter.py sends failed messages to (a real second queue)."""
    if "RedrivePolicy" not in attrs:
        return {}, set()
    target = redrive_target(QueueExtras(attributes=attrs))
    return ({DEAD_LETTER: target}, set()) if target else ({}, {DEAD_LETTER})


def redrive_target(extras: QueueExtras) -> str | None:
    """The dead-letter queue's name, if the queue has a RedrivePolicy."""
    text = extras.attributes.get("RedrivePolicy")
    return queue_of_arn(json.loads(text).get("deadLetterTargetArn")) if text else None

"""SQS's errors: the shape name (JSON ``__type``), the query protocol's code (also sent as the JSON
protocol's ``x-amzn-query-error`` header, which boto3 turns into ``Error.Code`` and the JS SDK v3
into its exception class), the HTTP status, and who is at fault.

A wrong pairing is not cosmetic: boto3 picks ``client.exceptions.QueueDoesNotExist`` from the
``__type`` shape name, and the SDKs' error parsers read the header.
"""

from __future__ import annotations

from dataclasses import dataclass

# shape name -> (query error code, HTTP status); shapes not listed use their own name and 400.
CODES: dict[str, tuple[str, int]] = {
    "QueueDoesNotExist": ("AWS.SimpleQueueService.NonExistentQueue", 400),
    "QueueNameExists": ("QueueAlreadyExists", 400),
    "QueueDeletedRecently": ("AWS.SimpleQueueService.QueueDeletedRecently", 400),
    "TooManyEntriesInBatchRequest": ("AWS.SimpleQueueService.TooManyEntriesInBatchRequest", 400),
    "EmptyBatchRequest": ("AWS.SimpleQueueService.EmptyBatchRequest", 400),
    "BatchEntryIdsNotDistinct": ("AWS.SimpleQueueService.BatchEntryIdsNotDistinct", 400),
    "BatchRequestTooLong": ("AWS.SimpleQueueService.BatchRequestTooLong", 400),
    "InvalidBatchEntryId": ("AWS.SimpleQueueService.InvalidBatchEntryId", 400),
    "MessageNotInflight": ("AWS.SimpleQueueService.MessageNotInflight", 400),
    "PurgeQueueInProgress": ("AWS.SimpleQueueService.PurgeQueueInProgress", 403),
    "UnsupportedOperation": ("AWS.SimpleQueueService.UnsupportedOperation", 400),
    "ReceiptHandleIsInvalid": ("ReceiptHandleIsInvalid", 404),
    "InvalidMessageContents": ("InvalidMessageContents", 400),
    "InvalidAttributeName": ("InvalidAttributeName", 400),
    "InvalidAttributeValue": ("InvalidAttributeValue", 400),
    "InvalidSecurity": ("InvalidSecurity", 403),
    "OverLimit": ("OverLimit", 403),
    "ResourceNotFoundException": ("ResourceNotFoundException", 404),
    "RequestThrottled": ("RequestThrottled", 403),
    "InvalidAddress": ("InvalidAddress", 404),
    # Not modelled as shapes, but sent by SQS (common AWS errors).
    "InvalidParameterValue": ("InvalidParameterValue", 400),
    "MissingParameter": ("MissingParameter", 400),
    "InvalidAction": ("InvalidAction", 400),
    "UnknownOperationException": ("InvalidAction", 400),
    "SerializationException": ("MalformedQueryString", 400),
    "MalformedQueryString": ("MalformedQueryString", 400),
    "RequestEntityTooLarge": ("RequestEntityTooLarge", 413),
    "InvalidClientTokenId": ("InvalidClientTokenId", 403),
    "SignatureDoesNotMatch": ("SignatureDoesNotMatch", 403),
    "MissingAuthenticationToken": ("MissingAuthenticationToken", 403),
    "IncompleteSignature": ("IncompleteSignature", 400),
    "RequestExpired": ("RequestExpired", 400),
    "AccessDenied": ("AccessDenied", 403),
    "ServiceUnavailable": ("ServiceUnavailable", 503),
    "InternalError": ("InternalError", 500),
}
# Statuses and codes above: the awsQueryError trait of each error shape in SQS's Smithy model
# (ReceiptHandleIsInvalid 404, PurgeQueueInProgress 403, ...).
#
# The JSON protocol's __type for errors SQS does not model as shapes: what SQS's JSON endpoint sends
# (recorded against AWS: a bad MaxNumberOfMessages is __type InvalidParameterValueException with
# x-amzn-query-error InvalidParameterValue;Sender). boto3 then reports Error.Code from the header
# (the query code, as against AWS) and Error.QueryErrorCode from the __type.
_JSON_SHAPE = {
    "InvalidParameterValue": "InvalidParameterValueException",
    "MissingParameter": "MissingRequiredParameterException",
    "InvalidAction": "UnknownOperationException",
}
# __type prefixes: SQS's modelled shapes are com.amazonaws.sqs#X; coral's own errors differ.
_CORAL = {
    "UnknownOperationException": "com.amazon.coral.service#",
    "SerializationException": "com.amazon.coral.service#",
}


@dataclass
class SqsError(Exception):
    """An error the client caused (or, 5xx, we did), rendered in the request's protocol."""

    shape: str
    message: str

    def __str__(self) -> str:
        return f"{self.shape}: {self.message}"

    @property
    def query_code(self) -> str:
        return CODES.get(self.shape, (self.shape, 400))[0]

    @property
    def status(self) -> int:
        return CODES.get(self.shape, (self.shape, 400))[1]

    @property
    def fault(self) -> str:
        return "Receiver" if self.status >= 500 else "Sender"

    @property
    def json_type(self) -> str:
        shape = _JSON_SHAPE.get(self.shape, self.shape)
        return _CORAL.get(shape, "com.amazonaws.sqs#") + shape


def invalid(message: str) -> SqsError:
    return SqsError("InvalidParameterValue", message)


def missing(name: str) -> SqsError:
    return SqsError("MissingParameter", f"The request must contain the parameter {name}.")

"""SQS permission actions: AddPermission and RemovePermission (not built yet: refused clearly)."""

from __future__ import annotations

from typing import Any

from daemon.http.sqs.actions.base import ActionGroup, Call
from daemon.http.sqs.errors import SqsError


class PermissionActions(ActionGroup):
    ACTIONS = ("AddPermission", "RemovePermission")

    async def add_permission(self, call: Call) -> dict[str, Any]:
        raise SqsError("UnsupportedOperation", "AddPermission is not supported by casque.")

    async def remove_permission(self, call: Call) -> dict[str, Any]:
        raise SqsError("UnsupportedOperation", "RemovePermission is not supported by casque.")

"""Who may do what on the SQS endpoint: the one place every request is authorized, before its
action runs (``SqsService.run``).

AWS's same-account evaluation, in this order, for each queue the action touches:

1. an explicit Deny in the queue's Policy that applies to the caller refuses (AccessDenied, 403);
2. an Allow in the queue's Policy that applies to the caller allows;
3. the key's grant (engine/access/grants.py) allows if it covers the action on that queue;
4. nothing else does.

Under ``sqs.auth = "none"`` the caller is anonymous with a full grant: only Deny statements whose
Principal is ``*`` can refuse it. Which queue an action touches: the QueueUrl's queue; for
CreateQueue/GetQueueUrl the named one; for StartMessageMoveTask/ListMessageMoveTasks the SourceArn's
queue (and SendMessage on the DestinationArn's, when given); CancelMessageMoveTask and ListQueues
have no queue (the grant must cover the action; ListQueues and ListDeadLetterSourceQueues then
show only the queues the grant covers for them, without reading each listed queue's Policy). The batch actions are
authorized as their single forms. Policies come from the queue's attributes, cached per server as its queue row is
(``QueueStore.trusted``): a change made through casque reaches a server that reads the due feed at its next read (about
a second), any other within 5 s; one made in CQL, or whose announcement was lost, within a minute.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from daemon.base.config import SqsSettings
from daemon.base.logs import get_logger
from daemon.engine.access.access_keys import AccessKey
from daemon.engine.access.grants import FULL, Grant, action_matches, iam_action
from daemon.engine.client import Casque
from daemon.http.sqs import attributes as qattr
from daemon.http.sqs import params
from daemon.http.sqs.actions.base import Call
from daemon.http.sqs.errors import SqsError
from daemon.http.sqs.policy import Caller, Policy, PolicyCache

log = get_logger("casque.sqs")
_NAMED = {"CreateQueue", "GetQueueUrl"}
_BY_SOURCE = {"StartMessageMoveTask", "ListMessageMoveTasks"}
_NO_QUEUE = {"CancelMessageMoveTask"}
_LISTINGS = {"ListQueues": "QueueUrls", "ListDeadLetterSourceQueues": "queueUrls"}  # action -> its answer's URL list


class AccessControl:
    def __init__(self, cq: Casque, settings: SqsSettings) -> None:
        self.cq = cq
        self.settings = settings
        self.policies = PolicyCache()
        self._unenforceable: set[str] = set()

    async def authorize(self, action: str, call: Call) -> None:
        """Return if the caller may run ``action`` as called; raise AccessDenied otherwise."""
        rights = call.principal.rights if call.principal else FULL
        caller = self._caller(call.principal)
        if action == "ListQueues":
            if not any(action_matches(p, "ListQueues") for p in rights.actions):
                raise self._denied(
                    caller, "ListQueues", "*", "no identity-based policy allows the sqs:ListQueues action"
                )
            return
        for act, queue in self._targets(action, call):
            await self._check(act, queue, rights, caller, call)

    def filter(self, action: str, call: Call, result: dict[str, Any]) -> dict[str, Any]:
        """A listing keeps only the queues the key's grant covers for that action. Done on the
        answer, so the action's paging is untouched: its NextToken still follows the last name it
        read, and a page may come back shorter than MaxResults (SQS's may too)."""
        field = _LISTINGS.get(action)
        if field is None or call.principal is None or field not in result:
            return result
        rights = call.principal.rights
        kept = [u for u in result[field] if rights.allows(action, str(u).rstrip("/").rsplit("/", 1)[-1])]
        out = {k: v for k, v in result.items() if k != field}
        return out | {field: kept} if kept or action != "ListQueues" else out

    async def _check(self, action: str, queue: str | None, rights: Grant, caller: Caller, call: Call) -> None:
        resource = qattr.arn(self.settings.region, self.settings.account, queue) if queue else "*"
        policy = await self._policy(queue) if queue and params.QUEUE_NAME.match(queue) else None
        # the condition keys only for a policy to read: most queues have none, and every request is checked here
        verdict = policy.decide(caller, action, resource, self._context(call, caller)) if policy else None
        if verdict == "Deny":
            raise self._denied(caller, action, resource, "with an explicit deny in a resource-based policy")
        if verdict == "Allow" or rights.allows(action, queue):
            return
        raise self._denied(caller, action, resource, f"no identity-based policy allows the sqs:{action} action")

    def _targets(self, action: str, call: Call) -> list[tuple[str, str | None]]:
        """The (IAM action, queue) pairs a request needs; an unreadable parameter checks nothing
        here, because the action itself refuses it before doing anything."""
        act = iam_action(action)
        if action in _NAMED:
            name = call.params.get("QueueName")
            return [(act, str(name))] if name else []
        if action in _BY_SOURCE:
            source = qattr.queue_of_arn(call.params.get("SourceArn"))
            dest = qattr.queue_of_arn(call.params.get("DestinationArn"))
            pairs: list[tuple[str, str | None]] = [(act, source)] if source else []
            if dest and action == "StartMessageMoveTask":
                pairs.append(("SendMessage", dest))
            return pairs
        if action in _NO_QUEUE:
            return [(act, None)]
        url = call.params.get("QueueUrl") or call.path_queue
        return [(act, str(url).rstrip("/").rsplit("/", 1)[-1])] if url else []

    async def _policy(self, queue: str) -> Policy | None:
        text = (await self.cq.extras.get(queue)).attributes.get("Policy")
        if not text:
            return None
        try:
            return self.policies.get(text, qattr.arn(self.settings.region, self.settings.account, queue))
        except SqsError as err:  # stored before casque enforced policies: the grants decide, as they did then
            if queue not in self._unenforceable:
                self._unenforceable.add(queue)
                log.warning("sqs_policy_unenforceable", queue=queue, reason=err.message)
            return None

    def _caller(self, key: AccessKey | None) -> Caller:
        if key is None:
            return Caller(None, None)
        return Caller(f"arn:aws:iam::{self.settings.account}:user/{key.access_key_id}", self.settings.account)

    def _context(self, call: Call, caller: Caller) -> dict[str, str]:
        """The request's condition keys (docs/security.md, "Permissions")."""
        now = self.cq.clock.now()
        out = {
            "aws:sourceip": call.source_ip,
            "aws:securetransport": "true" if call.secure else "false",
            "aws:currenttime": dt.datetime.fromtimestamp(now, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "aws:epochtime": str(int(now)),
            "aws:principaltype": "User" if caller.arn else "Anonymous",
        }
        if caller.arn and call.principal:
            out |= {
                "aws:principalarn": caller.arn,
                "aws:principalaccount": str(caller.account),
                "aws:username": call.principal.access_key_id,
                "aws:userid": call.principal.access_key_id,
            }
        return {k: v for k, v in out.items() if v}

    def _denied(self, caller: Caller, action: str, resource: str, why: str) -> SqsError:
        who = caller.arn or "anonymous"
        log.info("sqs_access_denied", principal=who, action=action, resource=resource)
        return SqsError(
            "AccessDenied",
            f"User: {who} is not authorized to perform: sqs:{action} on resource: {resource} because {why}",
        )

"""A Flower ``Grid`` inside one process, for tests and the overhead benchmark.

Flower's simulation engine needs Ray; :class:`LoopbackGrid` implements ``flwr.serverapp.Grid`` and delivers
every message to a real ``ClientApp`` with one ``Context`` per simulated SuperNode, through Flower's own
serialisation both ways (so what would not survive the wire fails here; sizes are counted). Left out: HTTP, the
SuperNode's 3 s polling, one ``flwr-clientapp`` process per message. ``received`` keeps every reply the server
pulled (its whole view, for the privacy tests). ``drop(node_id, message) -> bool`` simulates a SuperNode killed
before replying (that and later messages get ``NODE_UNAVAILABLE``); ``lose_context(node_id, message) -> bool``
a ClientApp whose ``Context`` push failed after its reply (the node keeps its previous context).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable

from flwr.app import Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.constant import SUPERLINK_NODE_ID, ErrorCode
from flwr.common.serde import context_from_proto, context_to_proto
from flwr.serverapp import Grid
from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects, no_object_id_recompute
from flwr.supercore.inflatable.inflatable_utils import inflate_object_from_contents
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity


def _wire(message: Message) -> tuple[Message, int]:
    """``message`` after the runtime's serialisation round trip (flwr 1.41's tree of inflatable objects, each
    ``deflate()``-d), and its size in bytes."""
    with no_object_id_recompute():
        objects = get_all_nested_objects(message)
        contents = {object_id: obj.deflate() for object_id, obj in objects.items()}
        size = sum(len(c) for c in contents.values())
        copy = inflate_object_from_contents(message.object_id, contents)  # consumes ``contents``
    copy.metadata.__dict__["_message_id"] = message.metadata.message_id
    return copy, size


class LoopbackGrid(Grid):
    """A Grid whose SuperNodes are ``ClientApp`` calls in this process (see the module docstring)."""

    def __init__(self, client_app: ClientApp, node_configs: dict[int, dict], *, run_id: int = 1,
                 drop: Callable[[int, Message], bool] | None = None,
                 lose_context: Callable[[int, Message], bool] | None = None):
        self.client_app = client_app
        self.contexts = {node: Context(run_id=run_id, node_id=node, node_config=dict(cfg), state=RecordDict(),
                                       run_config={}) for node, cfg in node_configs.items()}
        self.drop, self.lose_context = drop, lose_context
        self.down: set[int] = set()
        self.received: list[Message] = []
        self.bytes_down = self.bytes_up = 0
        self._replies: dict[str, Message] = {}
        self._run: Run | None = None
        # this process plays the ServerApp task: ``Message(...)`` reads its identity from here
        TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = run_id, SUPERLINK_NODE_ID, 0

    def set_run(self, run: Run) -> None:
        self._run = run

    @property
    def run(self) -> Run:
        return self._run

    def create_message(self, content: RecordDict, message_type: str, dst_node_id: int, group_id: str,
                       ttl: float | None = None) -> Message:
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> Iterable[int]:
        return [n for n in self.contexts if n not in self.down]

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for message in messages:
            message.metadata.__dict__["_message_id"] = uuid.uuid4().hex
            ids.append(message.metadata.message_id)
            node = message.metadata.dst_node_id
            if node in self.down or (self.drop is not None and self.drop(node, message)):
                self.down.add(node)  # what the SuperLink answers once the node's heartbeat has lapsed
                self._replies[message.metadata.message_id] = Message(
                    Error(code=ErrorCode.NODE_UNAVAILABLE, reason=f"node {node} unavailable (simulated)"),
                    reply_to=message)
                continue
            delivered, size = _wire(message)
            self.bytes_down += size
            self._replies[message.metadata.message_id] = self._deliver(node, delivered)
        return ids

    def _deliver(self, node: int, message: Message) -> Message:
        lost = self.lose_context is not None and self.lose_context(node, message)
        context = context_from_proto(context_to_proto(self.contexts[node])) if lost else self.contexts[node]
        try:
            reply = self.client_app(message=message, context=context)
        except Exception as exc:  # what the SuperNode turns a ClientApp exception into
            reply = Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION,
                                  reason=f"{type(exc)}:<'{exc}'>"), reply_to=message)
        if not lost:
            self.contexts[node] = context_from_proto(context_to_proto(context))  # what the SuperNode stores
        reply.metadata.__dict__["_message_id"] = uuid.uuid4().hex
        returned, size = _wire(reply)
        self.bytes_up += size
        return returned

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        out = [self._replies.pop(mid) for mid in list(message_ids) if mid in self._replies]
        self.received.extend(out)
        return out

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        return self.pull_messages(self.push_messages(messages))

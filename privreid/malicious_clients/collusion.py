"""The colluding attackers' seat at the server: a strategy wrapper that rewrites a round's uploads together.

:class:`RewriteRound` sits outermost around the server's strategy (the method's, with every defense), so every
defense sees the rewritten uploads: its accumulator keeps the round's uploads, hands them to ``rewrite`` at
``result()`` and passes what it returns to the inner accumulator in arrival order.  This simulates collusion
(:meth:`~privreid.malicious_clients.Adversary.poison_round`): the server learns nothing more than the uploads it would
receive."""

from __future__ import annotations

from collections.abc import Callable

from privreid.federated.policy import StateDict
from privreid.federated.strategy import Accumulator, RoundResult, ServerState, Strategy, Upload

Rewrite = Callable[[StateDict, list[Upload]], list[Upload]]


class RewriteRound(Strategy):
    """``inner`` whose round uploads ``rewrite(global_state, uploads)`` replaces before it aggregates them."""

    def __init__(self, inner: Strategy, rewrite: Rewrite):
        self.inner, self.rewrite = inner, rewrite

    def upload_weight(self):
        return self.inner.upload_weight()

    def configure(self, global_state, client, client_server_state, round_index):
        return self.inner.configure(global_state, client, client_server_state, round_index)

    def with_server_state(self, server_state: ServerState) -> RewriteRound:
        return RewriteRound(self.inner.with_server_state(server_state), self.rewrite)

    def accumulator(self, global_state: StateDict) -> Accumulator:
        return _Rewriting(self.inner.accumulator(global_state), lambda uploads: self.rewrite(global_state, uploads))


class _Rewriting(Accumulator):
    def __init__(self, inner: Accumulator, rewrite: Callable[[list[Upload]], list[Upload]]):
        self.inner, self.rewrite, self.uploads = inner, rewrite, []

    def add(self, upload: Upload) -> None:
        self.uploads.append(upload)

    def result(self) -> RoundResult:
        uploads, self.uploads = self.uploads, []
        for upload in self.rewrite(uploads):
            self.inner.add(upload)
        return self.inner.result()

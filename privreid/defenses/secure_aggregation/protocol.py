"""SecAgg+ (Bell, Bonawitz, Gascón, Lepoint & Raykova, CCS 2020) among the clients of one round, in one process.

Every step is a call to Flower's own SecAgg+ primitives (flwr 1.41, ``flwr.common.secure_aggregation``), in the
order Flower's client mod (``secaggplus_mod``) and server workflow (``SecAggPlusWorkflow``) take them:

0. *setup*: each client makes two elliptic-curve key pairs
   (``flwr.supercore.primitives.asymmetric.generate_key_pairs``): ``pk1`` for the pairwise masks, ``pk2`` to
   encrypt the shares it sends;
1. *share keys*: each client draws a private-mask seed ``b`` (32 random bytes), splits ``b`` and its ``sk1`` into
   Shamir shares (``create_shares``) among its neighbours and sends each share encrypted under the ECDH key it shares
   with that neighbour (``generate_shared_key``, ``encrypt``); the server only routes ciphertexts;
2. *collect masked vectors*: each surviving client pre-scales its vector by ``w / max_weight`` (rounded to the
   quantisation grid, Flower's ``q_ratio``), clips it to ``[-clipping_range, clipping_range]``, quantises it
   stochastically (``quantize``), prepends ``q_ratio`` (``factor_combine``), adds its private mask ``PRG(b)`` and,
   for every neighbour, ``+/- PRG(ECDH(sk1, pk1'))`` (``pseudo_rand_gen``), all modulo ``modulus_range``; the server
   adds the masked vectors;
3. *unmask*: the survivors send the shares of ``b`` of the clients that sent a vector and of ``sk1`` of those that
   dropped out after step 1; the server reconstructs them (``combine_shares``, at least ``threshold`` shares each),
   removes the masks and dequantises (``dequantize``).

The server ends up with ``sum_k q_k x_k`` (quantised) and ``sum_k q_k``, never an individual ``x_k``.  Neighbourhoods
are Flower's ring: with ``num_shares`` below the number of clients each client shares with ``(num_shares - 1) / 2``
clients on each side (SecAgg+); with ``num_shares`` equal to it, with everyone (SecAgg, Bonawitz et al., CCS 2017).

What privreid adds to the vector, outside Flower's format: two integer blocks after quantisation and before masking,
summed exactly: how many of the client's values the clipping range saturated (reported, never silent), and the
indicators of the sparse "extra" block (values only some clients send, averaged over the senders).

Randomness: keys, mask seeds and Shamir polynomials come from the operating system (``os.urandom`` through Flower and
PyCryptodome) as they must; they cancel out of the result.  Stochastic rounding, the one draw that changes the
result, uses numpy's global generator in Flower's ``quantize``; privreid seeds it per client from the round's seed
(:func:`rounding_seed`, and restores it), so runs stay deterministic and resumable.  On Flower the sites seed it the
same way before ``secaggplus_mod`` quantises (:mod:`privreid.defenses.secure_aggregation.flower`), so both runtimes
round every value identically and give the same model.
"""

from __future__ import annotations

import contextlib
import os
import random
from dataclasses import dataclass, field

import numpy as np
from flwr.common.secure_aggregation.crypto.shamir import combine_shares, create_shares
from flwr.common.secure_aggregation.crypto.symmetric_encryption import decrypt, encrypt, generate_shared_key
from flwr.common.secure_aggregation.ndarrays_arithmetic import (
    factor_combine,
    factor_extract,
    parameters_addition,
    parameters_mod,
    parameters_multiply,
    parameters_subtraction,
)
from flwr.common.secure_aggregation.quantization import dequantize, quantize
from flwr.common.secure_aggregation.secaggplus_utils import (
    pseudo_rand_gen,
    share_keys_plaintext_concat,
    share_keys_plaintext_separate,
)
from flwr.supercore.primitives.asymmetric import (
    bytes_to_private_key,
    bytes_to_public_key,
    generate_key_pairs,
    private_key_to_bytes,
    public_key_to_bytes,
)

from privreid.errors import ConfigError
from privreid.seeding import derive_seed

#: Flower's ``SecAggPlusWorkflow`` defaults (flwr 1.41)
FLOWER_CLIPPING_RANGE = 8.0
FLOWER_QUANTIZATION_RANGE = 2**22
FLOWER_MODULUS_RANGE = 2**32


@dataclass(frozen=True)
class Parameters:
    """The settings of one round of the protocol (all public).

    Args:
        num_shares: shares of each client's secrets (its neighbourhood size, itself included).
        threshold: shares needed to reconstruct a secret; fewer surviving neighbours abort the round.
        clipping_range: ``c``; pre-scaled values are clipped to ``[-c, c]`` before quantisation.
        quantization_range: ``Q``; ``[-c, c]`` maps onto the integers ``0..Q`` (quantum ``2c/Q``).
        modulus_range: the masks' modulus, a power of two above ``clients * Q``.
        max_weight: the public bound of a client's weight; a client pre-scales by ``w / max_weight``.
    """

    num_shares: int
    threshold: int
    clipping_range: float = FLOWER_CLIPPING_RANGE
    quantization_range: int = FLOWER_QUANTIZATION_RANGE
    modulus_range: int = FLOWER_MODULUS_RANGE
    max_weight: float = 1.0

    def check(self, clients: int) -> None:
        """ConfigError unless the protocol can run among ``clients`` clients without overflow."""
        if clients < 2:
            raise ConfigError(f"secure aggregation needs at least 2 clients per round (got {clients}): the sum of "
                              "one client's update is that update")
        if not 2 <= self.threshold <= self.num_shares:
            raise ConfigError(f"the reconstruction threshold ({self.threshold}) must lie in [2, shares = "
                              f"{self.num_shares}]")
        if self.num_shares > clients:
            raise ConfigError(f"secure aggregation with {self.num_shares} shares needs at least {self.num_shares} "
                              f"clients per round (got {clients})")
        if self.num_shares < clients and self.num_shares % 2 == 0:
            raise ConfigError(f"the number of shares ({self.num_shares}) must be odd when below the clients per "
                              f"round ({clients}): SecAgg+ neighbours are the client and (shares - 1) / 2 clients "
                              "on each side of a ring")
        if not self.clipping_range > 0 or not self.max_weight > 0:
            raise ConfigError("the clipping range and the maximum weight must be > 0")
        m = self.modulus_range
        if m <= 0 or m & (m - 1) or m > 2**32:
            raise ConfigError(f"the modulus range must be a power of two <= 2**32 (got {m})")
        if clients * self.quantization_range >= m:
            raise ConfigError(f"{clients} clients x quantisation range {self.quantization_range} overflow the "
                              f"modulus {m}: lower the quantisation range or raise the modulus")

    def quantum(self) -> float:
        """One quantisation step ``2c / Q`` in the pre-scaled domain."""
        return 2 * self.clipping_range / self.quantization_range


@dataclass
class SecureSum:
    """What the server learns from one round: the weighted mean, the sum of weights, counts."""

    mean: list[np.ndarray]                 #: ``sum_k q_k x~_k / sum_k q_k`` (float64)
    total_weight: float                    #: ``sum_k q_k / Q * max_weight`` over the surviving clients
    extra_sum: list[np.ndarray]            #: ``sum_k e~_k`` over the senders of each extra value
    extra_count: list[np.ndarray]          #: how many clients sent each extra value
    saturated: int                         #: values clipped to the range, over all surviving clients
    values: int                            #: values pre-scaled, over all surviving clients
    survivors: list[str]
    dropped: list[str]
    error_bound: float                     #: ``|mean - sum_k q_k x_k / sum_k q_k|`` per value, if unsaturated
    masked_bytes: int                      #: bytes of one masked vector (what each client uploads)
    protocol_bytes_up: int = 0             #: keys, encrypted shares and unmask shares sent by all clients
    protocol_bytes_down: int = 0           #: keys and encrypted shares the server forwards to all clients


@dataclass
class _Node:
    """One client's side of the protocol (``secaggplus_mod``'s stages)."""

    nid: int
    sk1: bytes = b""
    pk1: bytes = b""
    sk2: bytes = b""
    pk2: bytes = b""
    rd_seed: bytes = b""
    neighbours: dict[int, tuple[bytes, bytes]] = field(default_factory=dict)
    ss2: dict[int, bytes] = field(default_factory=dict)
    b_shares: dict[int, bytes] = field(default_factory=dict)
    sk1_shares: dict[int, bytes] = field(default_factory=dict)

    def setup(self) -> tuple[bytes, bytes]:
        sk1, pk1 = generate_key_pairs()
        sk2, pk2 = generate_key_pairs()
        self.sk1, self.pk1 = private_key_to_bytes(sk1), public_key_to_bytes(pk1)
        self.sk2, self.pk2 = private_key_to_bytes(sk2), public_key_to_bytes(pk2)
        return self.pk1, self.pk2

    def share_keys(self, keys: dict[int, tuple[bytes, bytes]], params: Parameters) -> dict[int, bytes]:
        """Stage 1: Shamir shares of ``b`` and ``sk1``, one per neighbour, encrypted for it."""
        self.neighbours = keys
        pks = [k for pair in keys.values() for k in pair]
        if len(set(pks)) != len(pks):
            raise RuntimeError("secure aggregation: two clients advertised the same public key")
        self.rd_seed = os.urandom(32)
        b_shares = create_shares(self.rd_seed, params.threshold, len(keys))
        sk1_shares = create_shares(self.sk1, params.threshold, len(keys))
        out = {}
        for idx, (nid, (_, pk2)) in enumerate(keys.items()):
            if nid == self.nid:
                self.b_shares[nid], self.sk1_shares[nid] = b_shares[idx], sk1_shares[idx]
                continue
            self.ss2[nid] = generate_shared_key(bytes_to_private_key(self.sk2), bytes_to_public_key(pk2))
            out[nid] = encrypt(self.ss2[nid], share_keys_plaintext_concat(self.nid, nid, b_shares[idx],
                                                                         sk1_shares[idx]))
        return out

    def receive_shares(self, ciphertexts: dict[int, bytes]) -> None:
        for src, ct in ciphertexts.items():
            actual, dst, b_share, sk1_share = share_keys_plaintext_separate(decrypt(self.ss2[src], ct))
            if actual != src or dst != self.nid:
                raise RuntimeError(f"secure aggregation: client {self.nid} got a share meant for {dst} from {actual}")
            self.b_shares[src], self.sk1_shares[src] = b_share, sk1_share

    def masked_vector(self, vector: list[np.ndarray], weight: float, extras: list[np.ndarray],
                      indicators: list[np.ndarray], params: Parameters, rounding_seed: int) -> list[np.ndarray]:
        """Stage 2, as ``secaggplus_mod._collect_masked_vectors`` plus privreid's integer blocks."""
        ratio = weight / params.max_weight
        if ratio > 1:
            raise ValueError(f"client weight {weight} exceeds the public max_weight {params.max_weight}")
        q_ratio = round(ratio * params.quantization_range)
        scaled = parameters_multiply(vector, q_ratio / params.quantization_range)
        c = params.clipping_range
        saturated = sum(int(np.count_nonzero(np.abs(a) > c)) for a in scaled + extras)
        with _numpy_seed(rounding_seed):
            quantised = quantize(scaled + extras, c, params.quantization_range)
        blocks = factor_combine(q_ratio, quantised) + [np.array([saturated], dtype=np.int64)] + \
            [i.astype(np.int64) for i in indicators]
        shapes = [a.shape for a in blocks]
        masked = parameters_addition(blocks, pseudo_rand_gen(self.rd_seed, params.modulus_range, shapes))
        for nid, (pk1, _) in self.neighbours.items():
            if nid == self.nid or nid not in self.b_shares:
                continue
            key = generate_shared_key(bytes_to_private_key(self.sk1), bytes_to_public_key(pk1))
            mask = pseudo_rand_gen(key, params.modulus_range, shapes)
            masked = parameters_addition(masked, mask) if self.nid > nid else parameters_subtraction(masked, mask)
        return parameters_mod(masked, params.modulus_range)

    def unmask_shares(self, active: list[int], dead: list[int]) -> dict[int, bytes]:
        """Stage 3: shares of ``b`` for the senders, of ``sk1`` for the dropped."""
        return {**{n: self.b_shares[n] for n in active}, **{n: self.sk1_shares[n] for n in dead}}


def rounding_seed(seed: int, client: str) -> int:
    """The seed of ``client``'s stochastic rounding in a round whose protocol seed is ``seed`` (both runtimes)."""
    return derive_seed(seed, "rounding", client) % 2**32


@contextlib.contextmanager
def _numpy_seed(seed: int):
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


def ring_neighbours(nids: list[int], num_shares: int) -> dict[int, list[int]]:
    """Flower's SecAgg+ graph: each node and ``num_shares // 2`` nodes on each side of the ring."""
    half, n = num_shares >> 1, len(nids)
    if num_shares >= n:
        return {nid: sorted(nids) for nid in nids}
    return {nid: sorted({nids[(i + off) % n] for off in range(-half, half + 1)}) for i, nid in enumerate(nids)}


def secure_sum(inputs: dict[str, tuple[list[np.ndarray], float, list[np.ndarray], list[np.ndarray]]],
               params: Parameters, *, seed: int, dropped: frozenset[str] = frozenset()) -> SecureSum:
    """Run the protocol among ``inputs``' clients; what the server learns.

    ``inputs[name] = (vector, weight, extras, indicators)``: the floating
    arrays to pre-scale by ``weight``, the extra arrays (summed unscaled,
    zeros where the client sends nothing) and their 0/1 indicators.  Clients
    in ``dropped`` go silent after sharing their keys (before sending a
    masked vector): the survivors' shares of their ``sk1`` remove their
    pairwise masks, and the sum is over the survivors.  ``seed`` seeds the
    neighbour graph and the stochastic rounding.
    """
    names = list(inputs)
    params.check(len(names))
    if len(names) - len(dropped & set(names)) < 1:
        raise RuntimeError("secure aggregation: every client dropped out")
    nid_of = {name: i + 1 for i, name in enumerate(names)}
    nodes = {nid_of[n]: _Node(nid_of[n]) for n in names}
    public = {nid: node.setup() for nid, node in nodes.items()}                       # stage 0
    order = list(nodes)
    random.Random(derive_seed(seed, "ring")).shuffle(order)
    graph = ring_neighbours(order, params.num_shares)
    up = sum(len(a) + len(b) for a, b in public.values())
    down = sum(len(public[n][0]) + len(public[n][1]) for nid in nodes for n in graph[nid])
    routed: dict[int, dict[int, bytes]] = {nid: {} for nid in nodes}                 # stage 1
    for nid, node in nodes.items():
        for dst, ct in node.share_keys({n: public[n] for n in graph[nid]}, params).items():
            routed[dst][nid] = ct
            up, down = up + len(ct), down + len(ct)
    for nid, node in nodes.items():
        node.receive_shares(routed[nid])
    dead = {nid_of[n] for n in dropped if n in nid_of}
    active = [nid for nid in nodes if nid not in dead]
    total: list[np.ndarray] | None = None                                             # stage 2
    masked_bytes = 0
    for nid in active:
        vector, weight, extras, indicators = inputs[names[nid - 1]]
        masked = nodes[nid].masked_vector(vector, weight, extras, indicators, params,
                                          rounding_seed(seed, names[nid - 1]))
        masked_bytes = sum(a.size for a in masked) * ((params.modulus_range.bit_length() - 1 + 7) // 8)
        total = masked if total is None else parameters_mod(parameters_addition(total, masked), params.modulus_range)
    collected: dict[int, list[bytes]] = {nid: [] for nid in nodes}                    # stage 3
    for nid in active:
        nb = graph[nid]
        shares = nodes[nid].unmask_shares([n for n in nb if n not in dead], [n for n in nb if n in dead])
        for owner, share in shares.items():
            collected[owner].append(share)
            up += len(share)
    shapes = [a.shape for a in total]
    for nid, shares in collected.items():
        if len(shares) < params.threshold:
            raise RuntimeError(f"secure aggregation: {len(shares)} shares of client {names[nid - 1]}'s secret "
                               f"survived, fewer than the threshold {params.threshold}; the round cannot be unmasked")
        secret = combine_shares(shares)
        if nid not in dead:
            total = parameters_subtraction(total, pseudo_rand_gen(secret, params.modulus_range, shapes))
            continue
        for other in graph[nid]:
            if other == nid or other in dead:
                continue
            key = generate_shared_key(bytes_to_private_key(secret), bytes_to_public_key(public[other][0]))
            mask = pseudo_rand_gen(key, params.modulus_range, shapes)
            # the survivor ``other`` added +mask if other > nid, else -mask; undo it
            total = parameters_subtraction(total, mask) if other > nid else parameters_addition(total, mask)
    total = parameters_mod(total, params.modulus_range)
    n_vec = len(inputs[names[0]][0])
    n_extra = len(inputs[names[0]][2])
    q_total, rest = factor_extract(total)
    quantised, rest = rest[:n_vec + n_extra], rest[n_vec + n_extra:]
    saturated, counts = int(rest[0][0]), [r.astype(np.int64) for r in rest[1:]]
    k = len(active)
    values = dequantize(quantised, params.clipping_range, params.quantization_range)
    offset = -(k - 1) * params.clipping_range
    values = [v + offset for v in values]
    q_total = int(q_total)
    mean = [v * (params.quantization_range / q_total) for v in values[:n_vec]]
    n_values = k * sum(a.size for a in inputs[names[0]][0] + inputs[names[0]][2])
    return SecureSum(mean=mean, total_weight=q_total / params.quantization_range * params.max_weight,
                     extra_sum=values[n_vec:], extra_count=counts, saturated=saturated, values=n_values,
                     survivors=[names[n - 1] for n in active], dropped=[names[n - 1] for n in sorted(dead)],
                     error_bound=k * params.quantum() * params.quantization_range / q_total,
                     masked_bytes=masked_bytes, protocol_bytes_up=up, protocol_bytes_down=down)

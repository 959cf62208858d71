"""Which attention-DP rank of a replica a request runs on, and the rank's own prefix cache.

In vLLM, SGLang and TensorRT-LLM each attention data-parallel rank of a
replica is a scheduler with its own KV pool and its own prefix (radix)
cache, and the stack's DP front end hands each request to one rank for its
whole life, by load or in turn, not by what the ranks have cached: vLLM and
SGLang as it arrives, TensorRT-LLM as the ranks fetch it (below).
So a system prompt is computed and held once per rank, and a session's next
turn finds its history only when it lands on the rank the last turn ran on
(about 1/dp of the time). Each rank's scheduler admits, grows and preempts
its requests against its own pool (engine/base.py). llmsim keeps one radix
tree, but a request's block ids are keyed by its rank (:func:`rank_ids`):
the tree splits into dp disjoint subtrees, requests on one rank share exactly
as before and requests on different ranks never do, while eviction of the
entries no request holds stays one LRU over the replica's free blocks.

The rules (``engine.dp_placement``), all but the last one request at a time on its arrival:

* ``round_robin``: SGLang's default (server_args.py ``load_balance_method:
  auto`` resolves to round_robin outside a PD prefill server,
  ``_handle_load_balance_method`` to 0.5.9, arg_groups/serving_hook.py
  ``handle_load_balance_method`` in 0.5.20;
  data_parallel_controller.py ``DataParallelController.round_robin_scheduler``);
* ``bootstrap_room``: SGLang's PD prefill server, where ``auto`` resolves to
  follow_bootstrap_room (0.5.9 maps a prefill server's round_robin to it
  too): ``follow_bootstrap_room_scheduler`` takes ``bootstrap_room % dp``,
  the room the router draws for each request uniformly from [0, 2^63).
  Here the draw is a fixed mix of the request's id (:func:`room`), so both
  engines and every rerun place a request alike;
* vLLM's internal DP load balancer (v1/engine/core_client.py
  ``DPLBAsyncMPClient.get_core_engine_for_request``, one API server), its
  chosen rank's waiting count raised at once, in three forms:
  ``queue_score`` (to 0.24), the rank of least 4 x waiting + running, the
  lowest on a tie, so an idle replica sends everything to rank 0;
  ``queue_score_rotating`` (0.25, 0.26), the same score with the scan's
  start (``eng_start_index``) moved on by one each request, so ties go in
  turn; ``kv_weighted_load`` (from 0.27), max(in flight, waiting + running)
  + 6 x waiting x max(0, KV usage - 0.5), the same rotating scan (in
  flight, what the client sent and has not seen end, is waiting + running
  here; the usage is the rank's own, its pool's blocks in use over the
  pool, as each engine core's block pool reports it). vLLM reads waiting, running and usage from the
  DP coordinator's stats, published at most every 100 ms
  (v1/engine/coordinator.py ``min_stats_update_interval_ms``); here they are
  the ones at the arrival (read in the 0.14.0, 0.20.0, 0.24.0-0.27.0,
  0.31.0 and 0.34.0 wheels);
* ``active_tokens``: TensorRT-LLM's attention DP, which places nothing on
  arrival. Requests wait in the executor's one queue; at the start of every
  iteration the ranks fetch from it, in its order, at most dp x
  max_num_active_requests (a rank's max_batch_size x pp: ``max_num_seqs``
  per rank here) less the requests the ranks hold, waiting or running (their
  active requests), and assign those together, longest prompt first, each to
  the rank of least (Σ prompt tokens of its active requests, its active
  requests, rank) among those holding fewer than max(ceil((active +
  fetched) / dp), the most any holds), a rank dropping out on reaching that
  count (executor_request_queue.py ``_fetch_new_requests_attention_dp``,
  ``_fetch_and_process_requests``, ``_schedule_attention_dp_requests``,
  ``_balance_requests_across_ranks`` in 1.0 and 1.1; scheduler/adp_router.py
  ``DefaultADPRouter.route_requests`` later, the even share also capped at
  max_num_active_requests, which the fetch limit already keeps). So a
  request waits for a rank with room rather than behind a busy rank's
  queue (``ReplicaBase._fetch``). ``attention_dp_config`` keeps its defaults:
  ``enable_balance`` off (its ``timeout_iters`` and ``batching_wait_iters``
  unused) and, where it exists, ``enable_kv_cache_aware_routing`` off; no
  scenario key sets them. A disaggregated decode leg (a generation-only
  request) waits in that queue and is fetched like any other, its rank
  chosen then; a decode pool that would read its cache hit at the hand-off
  (``decode_prefix_reuse``, :meth:`ReplicaBase.place_ahead`) is refused
  beside this rule (fleet/setup.py).
"""
from __future__ import annotations

import heapq
from typing import Optional, Sequence

#: engine.dp_placement's values (EngineConfig).
RULES = ("round_robin", "bootstrap_room", "queue_score", "queue_score_rotating", "kv_weighted_load",
         "active_tokens")

MASK64 = (1 << 64) - 1


def room(key: int) -> int:
    """A request's bootstrap room: splitmix64 of its id, top 63 bits (the router's draw
    from [0, 2^63), made a function of the request so that no random stream moves)."""
    z = (key * 0x9E3779B97F4A7C15 + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return (z ^ (z >> 31)) >> 1


def rank_ids(ids: Sequence[int], rank: int, dp: int) -> tuple[int, ...]:
    """A request's block ids as its rank's cache knows them: id x becomes
    x·dp + rank, one-to-one within a rank and never equal across two, so one
    radix tree holds dp caches that share nothing; chains stay chains. A keyed
    id may pass 2^63 (a workload's ids fit an int64, :mod:`workloads.block_ids`):
    only the replica's cache and tier maps hold them, as Python ints."""
    return tuple(x * dp + rank for x in ids)


class RankPlacement:
    """One replica's DP front end: the rank each request is placed on, and the
    per-rank counts its rule reads (requests waiting, running, and prompt
    tokens of those placed and not ended)."""

    __slots__ = ("rule", "dp", "turn", "waiting", "running", "tokens")

    def __init__(self, rule: str, dp: int) -> None:
        if rule not in RULES:
            raise ValueError(f"engine.dp_placement: unknown rule {rule!r} (one of {', '.join(RULES)})")
        self.rule = rule
        self.dp = dp
        self.turn = 0
        self.waiting = [0] * dp
        self.running = [0] * dp
        self.tokens = [0] * dp

    @property
    def reads_usage(self) -> bool:
        """Whether :meth:`peek` needs the ranks' KV usage."""
        return self.rule == "kv_weighted_load"

    def peek(self, key: int, usage: Optional[list[float]] = None) -> int:
        """The rank request ``key`` (its id) would be placed on if it arrived now, or under
        :attr:`fetches` if a fetch now took it alone (what a router asking this replica's cache
        is answered for: the hit the request would get if sent here); ``usage``: each rank's KV
        blocks in use over its own pool (vLLM's coordinator publishes every engine core's block
        pool usage, v1/engine/core_client.py ``lb_engines``), read where :attr:`reads_usage`."""
        dp = self.dp
        rule = self.rule
        if rule == "round_robin":
            return self.turn
        if rule == "bootstrap_room":
            return room(key) % dp
        waiting, running = self.waiting, self.running
        if rule != "active_tokens":
            start = 0 if rule == "queue_score" else self.turn
            best = start
            low = -1.0
            for i in range(dp):
                r = (start + i) % dp
                if rule == "kv_weighted_load":
                    pressure = 0.0 if usage is None else 6.0 * max(0.0, usage[r] - 0.5)
                    score = float(waiting[r] + running[r]) + (waiting[r] * pressure if waiting[r] else 0.0)
                else:
                    score = float(4 * waiting[r] + running[r])
                if low < 0.0 or score < low:
                    best, low = r, score
            return best
        return self._balance([0])[0][1]    # (one request alone: its length does not count)

    @property
    def fetches(self) -> bool:
        """Whether requests wait in the replica's one queue until the ranks fetch them
        (TensorRT-LLM's executor) rather than on a rank from their arrival."""
        return self.rule == "active_tokens"

    def fetch_limit(self, per_rank: int) -> int:
        """How many requests of the replica's queue the next iteration fetches at most:
        dp x ``per_rank`` (TensorRT-LLM's max_num_active_requests, a rank's max_batch_size
        x pp) less the requests every rank holds, waiting or running (its active requests)."""
        return self.dp * per_rank - sum(self.waiting) - sum(self.running)

    def _balance(self, prompts: Sequence[int]) -> list[tuple[int, int]]:
        """(index into ``prompts``, rank) for requests fetched together, in the order they are
        assigned: longest prompt first (a stable sort), each to the rank of least (Σ prompt
        tokens of its active requests, its active requests, rank) among those holding fewer
        than max(ceil((active + fetched) / dp), the most any holds) (a min-heap, a rank leaving
        it on reaching that count)."""
        dp = self.dp
        active = [self.waiting[r] + self.running[r] for r in range(dp)]
        expected = max(-(-(sum(active) + len(prompts)) // dp), max(active))
        heap = [(self.tokens[r], active[r], r) for r in range(dp) if active[r] < expected]
        heapq.heapify(heap)
        out: list[tuple[int, int]] = []
        for i in sorted(range(len(prompts)), key=lambda j: prompts[j], reverse=True):
            tokens, n, r = heapq.heappop(heap)
            out.append((i, r))
            if n + 1 < expected:
                heapq.heappush(heap, (tokens + prompts[i], n + 1, r))
        return out

    def assign(self, prompts: Sequence[int]) -> list[tuple[int, int]]:
        """Assign requests fetched together, of ``prompts`` tokens, to ranks (:meth:`_balance`'s
        pairs, in its order); each waits on its rank."""
        out = self._balance(prompts)
        for i, r in out:
            self.waiting[r] += 1
            self.tokens[r] += prompts[i]
        return out

    def place(self, key: int, prompt: int, usage: Optional[list[float]] = None) -> int:
        """Place arrival ``key`` of ``prompt`` tokens (``usage`` as in :meth:`peek`); it waits on its rank.
        Under :attr:`fetches` only a disaggregated decode leg is placed so (:meth:`assign` the rest)."""
        r = self.peek(key, usage)
        self.turn = (self.turn + 1) % self.dp
        self.waiting[r] += 1
        self.tokens[r] += prompt
        return r

    def admitted(self, rank: int) -> None:
        self.waiting[rank] -= 1
        self.running[rank] += 1

    def preempted(self, rank: int) -> None:
        self.running[rank] -= 1
        self.waiting[rank] += 1

    def ended(self, rank: int, prompt: int, waiting: bool) -> None:
        if waiting:
            self.waiting[rank] -= 1
        else:
            self.running[rank] -= 1
        self.tokens[rank] -= prompt

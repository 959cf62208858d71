"""A request's life inside one replica, shared by both engines."""
from __future__ import annotations

import math
from typing import Optional

from workloads.request import Request, Status

from .prefix_cache import Node

WAITING, PREFILL, DECODE, DONE = 0, 1, 2, 3


class Seq:
    """Engine-side state of a request.

    ``prompt`` is what must be prefilled at this admission: the input, plus
    the tokens already generated when the sequence was preempted and must be
    recomputed (vLLM's recompute preemption).
    """

    __slots__ = ("req", "order", "prompt", "done", "generated", "kv", "blocks", "state", "c", "gf", "z", "zg",
                 "last_token", "epoch",
                 "pin", "pin_ids", "pin_blocks", "cancel", "window_extra", "window_from", "rank", "ids")

    def __init__(self, req: Request) -> None:
        self.req = req
        self.order = -1          # admission order (newest = largest)
        self.prompt = req.input_tokens
        self.done = 0            # prompt tokens prefilled at this admission
        self.generated = 0       # output tokens produced so far
        self.kv = 0              # tokens whose KV is stored
        self.blocks = 0
        self.state = WAITING
        self.c = 0               # fast engine: kv − decode counter while decoding
        self.gf = 0              # fast engine: decode counter at which it finishes
        self.z: float = 0.0             # fast engine: stall clock when it last emitted a token
        self.zg = 0              # fast engine: decode counter when it (re)joined the decoding batch
        self.last_token: float = math.nan
        self.epoch = 0           # bumps on preemption, invalidating heap entries
        self.pin: Optional[Node] = None          # deepest prefix-cache node this sequence pins (its path is shared KV)
        self.pin_ids = 0         # ids on that path
        self.pin_blocks = 0      # KV blocks of those (shared; ``blocks`` counts only its own)
        self.cancel = False      # cancelled while running: leaves at the end of the iteration
        self.window_extra = 0    # blocks its prompt holds in the sliding-window groups beyond a window
        self.window_from = -1    # tokens whose window those groups keep while its last chunk is in flight
        self.rank = 0            # its attention-DP rank (engine/dp_placement.py; 0 with one rank)
        self.ids: Optional[tuple] = req.blocks   # its block ids as its rank's prefix cache keys them

    def reset_for_recompute(self) -> None:
        self.prompt = self.req.input_tokens + self.generated
        self.done = 0
        self.kv = 0
        self.blocks = 0
        self.pin = None
        self.pin_ids = 0
        self.pin_blocks = 0
        self.state = WAITING
        self.epoch += 1
        self.req.preemptions += 1


def finish(seq: Seq, now: float, status: Status = Status.FINISHED) -> None:
    seq.state = DONE
    seq.req.finish = now
    seq.req.status = status

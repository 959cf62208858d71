"""Multi-turn chat sessions: each turn resends the whole conversation.

``workload.session: {type: chat, ...}``. The arrival process gives session
starts; ``input_tokens`` is the length of each new user message and
``output_tokens`` of each response. Turn k's prompt is the system prompt,
every earlier message and response, then the new message, so it shares all
but the new message with turn k−1's prompt + response, and its block ids
start with all of turn k−1's (see :mod:`workloads.block_ids`).

Closed per session: turn k+1 is sent ``think_time_s`` after turn k's
response finished. A turn that ends rejected or cancelled ends its session
(the user gives up); so does a turn after the first that would not fit
``max_context_tokens`` (the user starts over, which is not modelled). Every random choice of a session is drawn when it
starts (:mod:`workloads.plans`), so the fleet only moves turns in time.
"""
from __future__ import annotations

from typing import Literal, NamedTuple, Optional

from pydantic import BaseModel, ConfigDict, Field

from .durations import Duration
from .lengths import LengthDist
from .plans import split

__all__ = ["ChatSessionSpec", "ChatPlan", "draw_chat_plans"]


class ChatSessionSpec(BaseModel):
    """Conversations: several turns per session, each resending the history."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["chat"] = "chat"
    turns: LengthDist = Field(description="turns per session (the user's messages), drawn per session")
    think_time_s: Duration = Field(description="seconds from a response's end to the user's next message")
    max_context_tokens: Optional[int] = Field(
        default=None, ge=2, description="a turn after the first whose prompt + response would exceed this is "
                                        "not sent: the session ends there (unset = no limit)")


class ChatPlan(NamedTuple):
    """One session's draws: its app (−1 = none) and per turn k the new message's
    length, the response's length and the pause after the response."""

    app: int
    messages: list[int]
    responses: list[int]
    thinks: list[float]


def draw_chat_plans(spec: ChatSessionSpec, messages: LengthDist, responses: LengthDist, streams,
                    apps, n: int) -> list[ChatPlan]:
    """Plans of the next ``n`` sessions (``streams``: :class:`workloads.spec.Streams`,
    ``apps``: :class:`workloads.system_prompts.Apps` or None)."""
    app = apps.choose(n).tolist() if apps is not None else [-1] * n
    turns = spec.turns.sample(streams.sessions, n)
    total = int(turns.sum())
    msg = split(messages.sample(streams.input_tokens, total), turns)
    out = split(responses.sample(streams.output_tokens, total), turns)
    think = split(spec.think_time_s.sample(streams.think, total), turns)  # the last pause of each is unused
    return [ChatPlan(*row) for row in zip(app, msg, out, think)]

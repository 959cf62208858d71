"""Agentic (coding-agent) sessions: model calls whose context grows by each output and tool result.

``workload.session: {type: agentic, ...}``. The arrival process gives session
starts; ``input_tokens`` is the user's task (the first message after any
system prompt) and ``output_tokens`` the length of every model call's output
(a tool call, or the final answer).

One session is an agent loop, closed on the fleet like a chat but with no
human in it:

* Call k's prompt is everything so far: system prompt, task, then every
  earlier call's output followed by the tool result the harness appended to
  it (``tool_result_tokens``). So prompt(k+1) = prompt(k) + output(k) +
  tool result(k), and its block ids start with all of call k's: the prefix
  cache and cache-aware routers see the whole history again, call after call.
* Call k+1 is sent ``pause_s`` after call k's output ended: the tool runs (a
  test suite, a search, a file read) or the harness thinks. Pauses are short
  next to a chat user's, and turns are many, so a session holds a long,
  growing context that is idle between calls: the KV-cache pressure that
  sets coding agents apart from chat.
* Sub-agents (``subagents``): a call other than the last may spawn ``count``
  sub-agents, with chance ``probability``. They start together ``pause_s``
  after the call ended, each with the parent's context (or, with
  ``shares: system_prompt``, only its system prompt) followed by its own task
  message, and run their own loops of ``turns`` calls (sub-agents do not
  spawn more). The parent waits: its next call is sent when the last of them
  ends, with their reports appended as that call's tool result. Their prompts
  start with the parent's block ids, so the prefix they share is computed
  once where the cache and the router keep it.
* A call that would not fit ``max_context_tokens`` (prompt + output) is not
  sent and ends its agent: the main agent's session ends (a harness would
  compact or start over, which is not modelled), a sub-agent ends and
  reports. A main agent's first call is always sent. A main-agent call that
  ends rejected or cancelled ends the session; a sub-agent's ends that
  sub-agent, and the parent goes on when the others are done.

Every request of a session, its sub-agents' included, carries the session's
id, so ``session_affinity`` hashes a session's whole tree to one replica
(its bounded loads may still send a call elsewhere) and a sharded run keeps
it in one shard. As in :mod:`workloads.chat`, every random
choice is drawn when the session starts (:mod:`workloads.plans`): main-agent
draws from the streams chat uses, every sub-agent draw from a stream of its
own (``Streams.agents``), so turning sub-agents on or off keeps the main
agents' calls.
"""
from __future__ import annotations

from typing import Literal, NamedTuple, Optional

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from .durations import Duration
from .lengths import LengthDist
from .plans import split

__all__ = ["AgenticSessionSpec", "SubagentSpec", "AgenticPlan", "SubagentPlan", "AgenticPlanner"]


class SubagentSpec(BaseModel):
    """Fan-out: which calls spawn sub-agents, how many, and what each does."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    probability: float = Field(ge=0, le=1, allow_inf_nan=False,
                               description="chance that a main-agent call other than its last spawns sub-agents")
    count: LengthDist = Field(description="sub-agents a spawning call starts (at least 1), drawn per spawning call")
    turns: LengthDist = Field(description="model calls of each sub-agent")
    task_tokens: LengthDist = Field(description="tokens of each sub-agent's task message, after what it shares")
    shares: Literal["context", "system_prompt"] = Field(
        default="context", description="what a sub-agent's prompt starts with: the parent's whole context "
                                       "(a fork) or only the system prompt (a fresh agent)")


class AgenticSessionSpec(BaseModel):
    """A tool-using agent: many model calls, each resending a context that grows by output and tool result."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["agentic"] = "agentic"
    turns: LengthDist = Field(description="model calls of the main agent per session, drawn per session")
    tool_result_tokens: LengthDist = Field(
        description="tokens the harness appends after each call's output (the tool's result) before the next call")
    pause_s: Duration = Field(description="seconds from a call's end to the next call (tool run or harness think)")
    max_context_tokens: Optional[int] = Field(
        default=None, ge=2, description="a call whose prompt + output would exceed this is not sent: its agent "
                                        "ends there (unset = no limit; a main agent's first call is always sent)")
    subagents: Optional[SubagentSpec] = Field(default=None, description="sub-agent fan-out (unset: none)")

    def requests_per_session(self) -> float:
        """Expected model calls per session, sub-agents' included (none cut by ``max_context_tokens``)."""
        main = self.turns.mean()
        sub = self.subagents
        if sub is None:
            return main
        return main + sub.probability * (main - 1) * sub.count.mean() * sub.turns.mean()

    def pauses_per_session_s(self) -> float:
        """Expected seconds of pauses along a session's critical path (the main agent's, and one
        sub-agent's per spawning call): its length when calls take no time."""
        main = self.turns.mean()
        sub = self.subagents
        along = (main - 1) * self.pause_s.mean()
        if sub is not None:
            along += sub.probability * (main - 1) * (sub.turns.mean() - 1) * self.pause_s.mean()
        return along


class SubagentPlan(NamedTuple):
    """One sub-agent's draws: its block-id owner (:data:`workloads.block_ids.SUBAGENT`),
    task length, and per call k the output, the tool result after it and the pause."""

    owner: int
    task: int
    outputs: list[int]
    tools: list[int]
    pauses: list[float]


class AgenticPlan(NamedTuple):
    """One session's draws: its app (−1 = none), the task's length, per main-agent
    call k the output, the tool result after it, the pause, and the sub-agents it spawns."""

    app: int
    task: int
    outputs: list[int]
    tools: list[int]
    pauses: list[float]
    children: list[list[SubagentPlan]]


class AgenticPlanner:
    """Draws the plans of the next ``n`` sessions (called by :class:`workloads.plans.Plans`).

    Sub-agents are numbered in draw order across calls, so a sub-agent's
    block-id owner depends only on the sessions before it, never on the fleet.
    """

    def __init__(self, spec: AgenticSessionSpec, tasks: LengthDist, outputs: LengthDist, streams, apps):
        self.spec, self.tasks, self.outputs, self.s, self.apps = spec, tasks, outputs, streams, apps
        self.owners = 0   # sub-agents drawn so far

    def __call__(self, n: int) -> list[AgenticPlan]:
        spec, s = self.spec, self.s
        app = self.apps.choose(n).tolist() if self.apps is not None else [-1] * n
        turns = spec.turns.sample(s.sessions, n)
        total = int(turns.sum())
        task = self.tasks.sample(s.input_tokens, n).tolist()
        tools = split(spec.tool_result_tokens.sample(s.input_tokens, total), turns)   # the last of each is unused
        outs = split(self.outputs.sample(s.output_tokens, total), turns)
        pauses = split(spec.pause_s.sample(s.think, total), turns)
        children = self._children(turns, total)
        return [AgenticPlan(*row) for row in zip(app, task, outs, tools, pauses, children)]

    def _children(self, turns: np.ndarray, total: int) -> list[list[list[SubagentPlan]]]:
        sub = self.spec.subagents
        if sub is None:
            return [[[] for _ in range(t)] for t in turns.tolist()]
        r = self.s.agents
        spawns = r.random(total) < sub.probability
        spawns[np.cumsum(turns) - 1] = False          # a session's last call spawns nothing
        count = np.where(spawns, sub.count.sample(r, total), 0)
        m = int(count.sum())
        cturns = sub.turns.sample(r, m)
        ctotal = int(cturns.sum())
        task = sub.task_tokens.sample(r, m).tolist()
        outs = split(self.outputs.sample(r, ctotal), cturns)
        tools = split(self.spec.tool_result_tokens.sample(r, ctotal), cturns)
        pauses = split(self.spec.pause_s.sample(r, ctotal), cturns)
        flat = [SubagentPlan(self.owners + j, *row) for j, row in enumerate(zip(task, outs, tools, pauses))]
        self.owners += m
        per_call = np.split(np.arange(m), np.cumsum(count)[:-1])
        calls = [[flat[j] for j in idx.tolist()] for idx in per_call]
        return split_lists(calls, turns)


def split_lists(items: list, counts: np.ndarray) -> list[list]:
    """``items`` cut into consecutive runs of ``counts[k]`` items (a list of lists, unlike :func:`split`)."""
    out, i = [], 0
    for c in counts.tolist():
        out.append(items[i:i + c])
        i += c
    return out

"""Block ids for synthetic prompts: equal ids exactly where the prefixes are equal.

``Request.blocks[j]`` names the first (j+1)·B tokens of the request's token
sequence (B = ``WorkloadSpec.block_tokens``), so the prefix cache can match
prompts by id without any text. The contract the engine relies on:

* chained: two requests' ids agree at every position up to j if and only if
  their tokens [0, (j+1)·B) are identical. A prefix cache matches ids from
  the start, so once two requests' ids differ at j nothing after j is
  compared: only the ids up to the first difference carry meaning;
* apps', sessions' and documents' ids are never reused for other content:
  two such requests carry the same id at j only if their tokens [0, (j+1)·B)
  are identical, and once they differ at j they differ at every j' > j;
* a lone request's own blocks (past its app's, which it states as
  ``Request.shared_ids``) are its alone: the first has an id no other
  request carries (its range's base), and the rest are *placeholders*,
  ``-(j+1)`` at position j, the same objects in every lone request. By the
  chain they can never be reached by another request's match, and they
  spare making ~200 int objects per request and freeing them as the cache
  evicts (~15 % of a 10M-DAU shard's time). Counting distinct ids (a set,
  not a prefix walk) over lone requests therefore undercounts;
* synthetic requests carry the ids of every *full* block of prompt ++ output,
  ⌊(input + output)/B⌋ of them, so the blocks a chat turn's response leaves in
  the cache are the ids the next turn's prompt starts with.

Ids are built from structure rather than hashed content: every owner of
content (an app's system prompt, a session's token stream, a sub-agent's
stream, a lone request) has its own range, ``id_base(kind, owner) + i`` with a counter i
local to the owner. A session's ids therefore do not depend on what other
sessions did or how the fleet interleaved them, and no two owners can ever
collide. The ranges are 2³² ids wide and owners stay below 2²⁹, so every
id fits an int64 (numpy arrays, hash maps in other languages).
"""
from __future__ import annotations

__all__ = ["APP", "SESSION", "REQUEST", "SUBAGENT", "id_base", "own_ids", "Document"]

APP, SESSION, REQUEST = 0, 1, 2   # kinds of owner
SUBAGENT = 3   # an agentic session's sub-agent (workloads.agentic): its stream past the prefix it shares
_KIND_BITS = 2
_LOCAL_BITS = 32
_MAX_OWNER = 1 << (63 - _KIND_BITS - _LOCAL_BITS)


def id_base(kind: int, owner: int) -> int:
    """The first id of ``owner``'s range (owner = app, session or request index)."""
    if not 0 <= owner < _MAX_OWNER:
        raise ValueError(f"owner index {owner} is outside the block-id space (0 to {_MAX_OWNER - 1})")
    return ((owner << _KIND_BITS) | kind) << _LOCAL_BITS


_placeholders: tuple[int, ...] = ()


def own_ids(base: int, start: int, n: int) -> tuple[int, ...]:
    """A lone request's ``n`` own block ids from position ``start``: ``base``
    (its range's first id), then the placeholders of positions start+1 …
    start+n−1 (see the module docstring)."""
    global _placeholders
    if n <= 0:
        return ()
    end = start + n
    if len(_placeholders) < end:
        _placeholders = tuple(range(-1, -(2 * end + 1), -1))   # position j holds -(j+1)
    return (base,) + _placeholders[start + 1:end]


class Document:
    """One owner's token stream (a session's conversation or file, or one
    request's prompt) and the ids of its full blocks, assigned on demand.

    ``head`` are the ids the stream starts with that belong to someone else
    (the app's system-prompt blocks). :meth:`edit` forgets every block from
    the edited token on, so the next :meth:`blocks` call gives them fresh
    ids; blocks before it keep theirs, which is what makes consecutive
    prompts share a prefix.
    """

    __slots__ = ("base", "next", "ids", "head", "block_tokens")

    def __init__(self, base: int, block_tokens: int, head: tuple[int, ...] = ()):
        self.base = base
        self.next = 0
        self.ids: list[int] = list(head)
        self.head = len(head)
        self.block_tokens = block_tokens

    def blocks(self, n: int) -> tuple[int, ...]:
        """Ids of the stream's first ``n`` blocks."""
        short = n - len(self.ids)
        if short > 0:
            self.ids.extend(self.fresh(short))
        return tuple(self.ids[:n])

    def fresh(self, n: int) -> range:
        """``n`` ids used nowhere else: for content that is not part of the stream
        (an autocomplete's output, which the next prompt does not contain)."""
        start = self.base + self.next
        self.next += n
        return range(start, start + n)

    def edit(self, token: int) -> None:
        """The stream changed at token position ``token`` and everything after it moved."""
        cut = max(token // self.block_tokens, self.head)
        del self.ids[cut:]

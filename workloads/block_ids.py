"""Block ids for synthetic prompts: equal ids exactly where the prefixes are equal.

``Request.blocks[j]`` names the first (j+1)·B tokens of the request's token
sequence (B = ``WorkloadSpec.block_tokens``), so the prefix cache can match
prompts by id without any text. The contract the engine relies on:

* chained: two requests carry the same id at position j if and only if their
  tokens [0, (j+1)·B) are identical. Hence an id is never reused for other
  content, and once two requests' ids differ at j they differ at every j' > j;
* ids in a lone request's own range are carried by that request alone,
  which it states as ``Request.shared_ids`` (the ids before them: its
  app's); a session's or a document's ids are all shareable;
* synthetic requests carry the ids of every *full* block of prompt ++ output,
  ⌊(input + output)/B⌋ of them, so the blocks a chat turn's response leaves in
  the cache are the ids the next turn's prompt starts with.

Ids are built from structure rather than hashed content: every owner of
content (an app's system prompt, a session's token stream, a lone
request) has its own range, ``id_base(kind, owner) + i`` with a counter i
local to the owner. A session's ids therefore do not depend on what other
sessions did or how the fleet interleaved them, and no two owners can ever
collide. The ranges are 2³² ids wide and owners stay below 2²⁹, so every
id fits an int64 (numpy arrays, hash maps in other languages).
"""
from __future__ import annotations

__all__ = ["APP", "SESSION", "REQUEST", "id_base", "Document"]

APP, SESSION, REQUEST = 0, 1, 2   # kinds of owner
_KIND_BITS = 2
_LOCAL_BITS = 32
_MAX_OWNER = 1 << (63 - _KIND_BITS - _LOCAL_BITS)


def id_base(kind: int, owner: int) -> int:
    """The first id of ``owner``'s range (owner = app, session or request index)."""
    if not 0 <= owner < _MAX_OWNER:
        raise ValueError(f"owner index {owner} is outside the block-id space (0 to {_MAX_OWNER - 1})")
    return ((owner << _KIND_BITS) | kind) << _LOCAL_BITS


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

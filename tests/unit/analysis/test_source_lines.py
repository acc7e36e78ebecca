"""A member's lines are counted at ``\\n`` alone, as ``line N`` is everywhere (the ring view's
origins, ``sed -n Np``): text that holds other line breaks (U+2028 in a Docker label, ``\\x85``,
``\\x1c``) must not shift every later line's citation."""

from __future__ import annotations

from forensics.analysis.source import Source


class _Bundle:
    manifest: dict[str, object] = {}

    def __init__(self, members: dict[str, bytes]) -> None:
        self.members = members

    def read_bytes(self, member: str) -> bytes:
        return self.members[member]


def test_lines_end_at_newline_alone() -> None:
    data = {"a.txt": "one \u2028 still one \x85 and \x1c\ntwo\r\nthree".encode(), "b.txt": b"x\n\n", "c.txt": b""}
    src = Source(_Bundle(data), "b", data)
    assert src.text_lines("a.txt") == ["one \u2028 still one \x85 and \x1c", "two", "three"]
    assert src.text_lines("b.txt") == ["x", ""]
    assert src.text_lines("c.txt") == []

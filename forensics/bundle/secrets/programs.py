"""Passwords that known programs take after a short ``-p`` option.

A short option says nothing by its name: ``ssh -p 22`` and ``python -p`` are no passwords, so
``-p`` is never guessed at in general. Two families of programs document it as the password:

- the MySQL clients (``mysql``, ``mysqldump``, ``mariadb``, ...): ``-pSECRET``, glued; a bare ``-p``
  prompts, and the argument after it is the database, not a password;
- registry logins (``docker login``, ``podman login``, ``nerdctl login``, ``helm registry login``,
  ``skopeo login``, ``buildah login``, ``oras login``, ``crane auth login``): ``-p SECRET``,
  ``-pSECRET`` and ``-p=SECRET`` (``--password-stdin`` takes no value: its neighbour is kept).

:func:`argv_password_spans` finds them in a command line given as arguments (``/proc/PID/cmdline``,
a container's ``Cmd``); :func:`text_password_spans` in free text (a log, a shell line), where the
command is known by its program's name earlier on the same line and command.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import re2

__all__ = ["argv_password_spans", "text_password_spans"]

MYSQL_CLIENTS = frozenset({
    "mysql", "mysqldump", "mysqladmin", "mysqlimport", "mysqlshow", "mysqlcheck", "mysqlpump",
    "mysqlslap", "mariadb", "mariadb-dump", "mariadb-admin", "mariadb-import", "mariadb-show",
    "mariadb-check", "mariadb-slap",
})
REGISTRY_LOGINS = frozenset({"docker", "podman", "nerdctl", "helm", "skopeo", "buildah", "oras", "crane"})
# wrappers that run the program named after their own options (and NAME=VALUE settings)
_WRAPPERS = frozenset({"sudo", "doas", "env", "exec", "nice", "nohup", "ionice", "timeout", "command"})


def _basename(arg: str) -> str:
    name = posixpath.basename(arg)
    return name[:-4] if name.endswith(".exe") else name


def _program(args: Sequence[str]) -> tuple[str, int]:
    """The basename of the known program a command line runs, directly or through wrappers
    (``sudo -u db mysql ...``: the first known program after a wrapper), and its index."""
    if not args:
        return "", 0
    first = _basename(args[0])
    if first not in _WRAPPERS:
        return first, 0
    for i in range(1, len(args)):
        name = _basename(args[i])
        if name in MYSQL_CLIENTS or name in REGISTRY_LOGINS:
            return name, i
    return "", len(args)


def argv_password_spans(args: Sequence[str]) -> dict[int, int]:
    """``{index: offset}``: the argument at ``index`` holds a password from ``offset`` to its end."""
    program, at = _program(args)
    out: dict[int, int] = {}
    if program in MYSQL_CLIENTS:
        for i in range(at + 1, len(args)):
            if args[i] == "--":
                break
            if args[i].startswith("-p") and len(args[i]) > 2:
                out[i] = 2
    elif program in REGISTRY_LOGINS and "login" in args[at + 1:]:
        i = at + 1
        while i < len(args):
            arg = args[i]
            if arg == "--":
                break
            if arg == "-p" and i + 1 < len(args):
                out[i + 1] = 0
                i += 2
                continue
            if arg.startswith("-p=") and len(arg) > 3:
                out[i] = 3
            elif arg.startswith("-p") and len(arg) > 2:
                out[i] = 2
            i += 1
    return out


def _c(pattern: str) -> Any:
    return re2.compile(pattern.encode(), options=re2.Options())


# the program's name starts a word (after a blank, a path's '/', a quote or the line's start); the
# option is in the same command: no line end, ';', '|' or '&' between them
_START = r"(?:^|[\s/\"'`(])"
_SAME_COMMAND = r"[^\n;|&]*?"
_CRED = r"[\"']?(?P<cred>[^\s\"';|&`)]+)"


def _alternatives(names: frozenset[str]) -> str:
    return "|".join(sorted((n.replace(".", r"\.") for n in names), key=len, reverse=True))


_MYSQL_RE = _c(rf"(?m){_START}(?:{_alternatives(MYSQL_CLIENTS)})(?:\.exe)?[ \t]{_SAME_COMMAND}[ \t]-p{_CRED}")
_LOGIN_RE = _c(rf"(?m){_START}(?:{_alternatives(REGISTRY_LOGINS)})(?:\.exe)?[ \t]{_SAME_COMMAND}\blogin\b"
               rf"{_SAME_COMMAND}[ \t]-p(?:[ \t]+|=)?{_CRED}")


def text_password_spans(data: bytes, env_allowed: Callable[[str], bool]) -> Iterator[tuple[int, int]]:
    """Byte spans of the passwords after ``-p`` of the programs above, in free text (a context
    finder: ``env_allowed`` is not needed here)."""
    del env_allowed
    if b" -p" not in data and b"\t-p" not in data:
        return  # (a substring test first: most texts hold no short -p option at all)
    for regex, words in ((_MYSQL_RE, (b"mysql", b"mariadb")), (_LOGIN_RE, (b"login",))):
        if not any(w in data for w in words):
            continue
        for m in regex.finditer(data):
            start, end = m.span(1)  # the expression's only group: cred
            if end > start:
                yield start, end

"""Resource URIs in one spelling (RFC 3986, section 6.2.2), so that no rule, scope, lock or ``explain`` can be
dodged by writing the same URI another way (``docs://pages/%69nternal`` is ``docs://pages/internal``).

``normalize`` decodes percent-encoded unreserved characters, writes the other percent-encodings with upper-case
hex digits, lower-cases the scheme (and the host, for schemes whose hosts are DNS names), and removes ``.`` and
``..`` path segments. Every URI a client sends is normalised once, where it enters (``AgentView.resource``); the
URIs packs and servers declare, and the URI patterns of rules, are normalised the same way when they are compiled.
``expand`` builds the URI a template gives for decoded parameters (RFC 6570 simple and reserved expansion).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from urllib.parse import quote

_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_PERCENT = re.compile(r"%([0-9A-Fa-f]{2})")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
_DNS_SCHEMES = frozenset({"http", "https", "ws", "wss", "ftp", "file"})
_DEFAULT_PORTS = {"http": "80", "https": "443", "ws": "80", "wss": "443", "ftp": "21"}
_RESERVED = ":/?#[]@!$&'()*+,;="


def _percent(match: re.Match[str]) -> str:
    char = chr(int(match.group(1), 16))
    return char if char in _UNRESERVED else f"%{match.group(1).upper()}"


@functools.lru_cache(maxsize=4096)
def normalize(uri: str) -> str:
    """``uri`` in its normal form (RFC 3986, 6.2.2 and, for web schemes, 6.2.3): the same resource, spelt one way.
    Text that does not start with a scheme is no URI and is returned as it is (a path's ``%41`` is its name)."""
    if _SCHEME.match(uri) is None:
        return uri
    text = _PERCENT.sub(_percent, uri) if "%" in uri else uri
    scheme_match = _SCHEME.match(text)
    assert scheme_match is not None
    scheme = scheme_match.group(0)[:-1].lower()
    rest = text[scheme_match.end():]
    query = ""
    for mark in ("#", "?"):
        if mark in rest:
            rest, tail = rest.split(mark, 1)
            query = f"{mark}{tail}{query}"
    if rest.startswith("//"):
        authority, slash, path = rest[2:].partition("/")
        if scheme in _DNS_SCHEMES:
            userinfo, at, host = authority.rpartition("@")
            named, colon, port = host.rpartition(":")
            if colon and (port.isdigit() or not port):  # [::1] is an address, [::1]:8080 one with a port
                host = named
            else:
                colon = port = ""
            if port == _DEFAULT_PORTS.get(scheme) or not port:
                colon = port = ""
            authority = f"{userinfo}{at}{host.lower().rstrip('.') or host}{colon}{port}"
            slash = slash or "/"
        path = _remove_dots(slash + path)
        return f"{scheme}://{authority}{path}{query}"
    if rest.startswith("/"):
        rest = _remove_dots(rest)
    return f"{scheme}:{rest}{query}"


def _remove_dots(path: str) -> str:
    """RFC 3986's remove_dot_segments for a path that starts with '/'."""
    if "." not in path:
        return path
    out: list[str] = []
    segments = path.split("/")[1:]
    for i, segment in enumerate(segments):
        last = i == len(segments) - 1
        if segment == ".":
            if last:
                out.append("")
        elif segment == "..":
            if out:
                out.pop()
            if last:
                out.append("")
        else:
            out.append(segment)
    return "/" + "/".join(out)


def expand(template: str, parameters: Mapping[str, str]) -> str | None:
    """The URI ``template`` gives for these (decoded) parameters, normalised: ``{name}`` percent-encodes all but
    unreserved characters, ``{+name}`` keeps reserved ones too. None when the template holds another kind of
    expression or a parameter is missing."""
    out, last = [], 0
    for match in re.finditer(r"\{(\+?)([A-Za-z_][A-Za-z0-9_]*)\}|\{[^{}]*\}", template):
        if match.group(2) is None or match.group(2) not in parameters:
            return None
        out.append(template[last:match.start()])
        out.append(quote(parameters[match.group(2)], safe=_RESERVED if match.group(1) else ""))
        last = match.end()
    out.append(template[last:])
    return normalize("".join(out))

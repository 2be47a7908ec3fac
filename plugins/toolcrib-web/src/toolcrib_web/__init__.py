"""toolcrib pack ``web``: read a web page as text, search the web, download a URL into the workspace; private
addresses refused (``toolcrib.net``). See README.md."""

from __future__ import annotations

import json
import os
import re
import time
from typing import Annotated, Any
from urllib.parse import urlencode, urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

import toolcrib
from toolcrib import AvailabilityContext, Context, ToolError
from toolcrib.net import WebLimits, chunks, open_url
from toolcrib.net import fetch as net_fetch
from toolcrib.workspace import Root, display, parts_of

__all__ = ["Settings", "toolcrib_settings_model", "toolcrib_tools"]

USER_AGENT = "toolcrib-web/0.1"


class Settings(BaseModel):
    """``[packs.web]``."""

    model_config = ConfigDict(extra="forbid")

    max_bytes: int = Field(50 * 1024 * 1024, gt=0, description="largest download")
    timeout: float = Field(60.0, gt=0, description="seconds for the whole download, redirects included")
    max_redirects: int = Field(5, ge=0)
    allow_private_networks: bool = Field(False, description="also fetch from private and loopback addresses")
    allowed_private_hosts: list[str] = Field(default_factory=list, description='"host:port" exceptions')
    max_page_bytes: int = Field(5 * 1024 * 1024, gt=0, description="largest page web__fetch reads")
    search_url: str | None = Field(None, description="a SearXNG instance (its JSON API) for web__search; without "
                                   "one the tool is not offered")
    search_results: int = Field(8, gt=0, le=50, description="results web__search gives at most")

    @field_validator("search_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and urlsplit(value).scheme not in ("http", "https"):
            raise ValueError(f"expected an http(s) URL, got {value!r}")
        return value


def _settings(ctx: Context | AvailabilityContext) -> Settings:
    return ctx.settings if isinstance(ctx.settings, Settings) else Settings()


def _limits(settings: Settings, verb: str, max_bytes: int | None = None) -> WebLimits:
    return WebLimits(max_bytes=max_bytes or settings.max_bytes, timeout=settings.timeout,
                     max_redirects=settings.max_redirects, allow_private_networks=settings.allow_private_networks,
                     allowed_private_hosts=tuple(settings.allowed_private_hosts), verb=verb, user_agent=USER_AGENT)


@toolcrib.tool(annotations={"destructiveHint": True, "openWorldHint": True}, rule_subject=("url", "path"),
                task="optional")
def download_file(
    url: Annotated[str, Field(max_length=8192, description="An http(s) URL")],
    path: Annotated[str, Field(max_length=4096, description="Destination, relative to the workspace root")],
    ctx: Context,
    overwrite: Annotated[bool, Field(strict=True, description="Replace an existing file at path")] = False,
) -> dict[str, Any]:
    """Download a URL into a file of the workspace. Private and loopback addresses are refused, every
    redirect is checked (addresses and the agent's URL rules), and size and time are capped; a failed download
    leaves no partial file."""
    settings = _settings(ctx)
    limits = _limits(settings, "download")
    deadline = time.monotonic() + settings.timeout
    parts = parts_of(path, allow_root=False)
    root = Root(ctx.workspace)
    with open_url(url, limits, lambda hop: ctx.check_rules(url=hop), deadline) as (final, response):
        size = 0
        with root.atomic_writer(parts, create_parents=True, overwrite=overwrite) as (fd, _):
            for chunk in chunks(response, limits, deadline, "; nothing was saved"):
                size += len(chunk)
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view):]
        return {"url": final, "path": display(parts), "bytes": size,
                "content_type": response.getheader("Content-Type")}


PAGE_TYPES = ("text/html", "application/xhtml+xml")
TEXT_TYPES = ("application/json", "application/xml", "application/javascript", "application/x-yaml")
DROPPED = ("script", "style", "noscript", "template", "iframe", "svg", "canvas", "nav", "header", "footer", "aside",
           "form", "button")


@toolcrib.tool(annotations={"readOnlyHint": True, "openWorldHint": True}, rule_subject="url")
def fetch(
    url: Annotated[str, Field(max_length=8192, description="An http(s) URL")],
    ctx: Context,
    max_chars: Annotated[int, Field(ge=100, le=1_000_000, description="Longest text to return")] = 50_000,
) -> str:
    """Read a web page as text: HTML becomes Markdown (the page's main content, without scripts, styles,
    navigation and forms); plain text, JSON and XML come as they are. Private addresses are refused, every redirect
    is checked, size and time are capped. To save a file instead, use web__download_file."""
    settings = _settings(ctx)
    got = net_fetch(url, _limits(settings, "fetch", settings.max_page_bytes), lambda hop: ctx.check_rules(url=hop))
    mime, _, params = (got.content_type or "").partition(";")
    mime = mime.strip().lower()
    charset = next((p.split("=", 1)[1].strip().strip('"') for p in params.split(";") if "charset=" in p.lower()),
                   "utf-8")
    try:
        text = got.body.decode(charset, errors="replace")
    except LookupError:
        text = got.body.decode("utf-8", errors="replace")
    if mime in PAGE_TYPES or (not mime and text.lstrip()[:15].lower().startswith(("<!doctype html", "<html"))):
        title, text = _markdown(text)
        heading = f"# {title}\n\n" if title else ""
        text = f"{heading}{text}"
    elif not (mime.startswith("text/") or mime in TEXT_TYPES or mime.endswith(("+json", "+xml")) or not mime):
        raise ToolError(f"{got.url} is {mime}, not a page to read; web__download_file saves it as a file")
    if len(text) > max_chars:
        text = f"{text[:max_chars]}\n\n[cut at {max_chars} of {len(text)} characters]"
    return f"{got.url}\n\n{text}"


def _markdown(html: str) -> tuple[str | None, str]:
    """The page's title, and its main content as Markdown (markdownify over BeautifulSoup)."""
    from bs4 import BeautifulSoup
    from markdownify import markdownify

    soup = BeautifulSoup(html, "html.parser")
    title = soup.title.get_text(" ", strip=True) if soup.title is not None else None
    for tag in soup.find_all(DROPPED):
        tag.decompose()
    main = soup.find("main") or soup.find("article") or soup.body or soup
    text = markdownify(str(main), heading_style="ATX", strip=["img"])
    lines = [line.rstrip() for line in text.splitlines()]
    cleaned = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
    return title or None, cleaned


def search_configured(ctx: AvailabilityContext) -> bool | str:
    if _settings(ctx).search_url:
        return True
    return "no search backend: set [packs.web] search_url to a SearXNG instance"


@toolcrib.tool(annotations={"readOnlyHint": True, "openWorldHint": True}, is_available=search_configured,
               rule_subject="query")
def search(
    query: Annotated[str, Field(min_length=1, max_length=500, description="What to search the web for")],
    ctx: Context,
) -> dict[str, Any]:
    """Search the web. Gives each result's title, URL and a snippet; read a result with web__fetch."""
    settings = _settings(ctx)
    assert settings.search_url is not None
    base = settings.search_url.rstrip("/")
    target = urlsplit(base)
    port = target.port or (443 if target.scheme == "https" else 80)
    # the backend is the operator's: it may be on a private network (it usually is)
    limits = WebLimits(max_bytes=settings.max_page_bytes, timeout=settings.timeout, max_redirects=0,
                       allowed_private_hosts=(f"{target.hostname}:{port}",), verb="search", user_agent=USER_AGENT,
                       headers=(("Accept", "application/json"),))
    got = net_fetch(f"{base}/search?{urlencode({'q': query, 'format': 'json'})}", limits)
    try:
        answer = json.loads(got.body)
    except ValueError:
        raise ToolError("the search backend did not answer with JSON (is its json format enabled?)") from None
    found = answer.get("results") if isinstance(answer, dict) else None
    if not isinstance(found, list):
        raise ToolError("the search backend's answer has no results list")
    results = []
    for item in found:
        if not isinstance(item, dict) or not isinstance(item.get("url"), str):
            continue
        results.append({"title": str(item.get("title") or ""), "url": item["url"],
                        "snippet": str(item.get("content") or "")})
        if len(results) == settings.search_results:
            break
    return {"query": query, "results": results}


@toolcrib.hookimpl
def toolcrib_tools() -> list[Any]:
    return [fetch, search, download_file]


@toolcrib.hookimpl
def toolcrib_settings_model() -> type[BaseModel]:
    return Settings

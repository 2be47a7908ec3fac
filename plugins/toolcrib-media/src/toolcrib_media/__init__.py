"""toolcrib pack ``media``: view images (vision models only) and generate them. See README.md."""

from __future__ import annotations

import base64
import binascii
import json
import os
import time
import urllib.error
import urllib.request
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, model_validator

import toolcrib
from toolcrib import AvailabilityContext, Context, ToolError
from toolcrib.net import WebLimits, fetch
from toolcrib.workspace import Root, display, parts_of

__all__ = ["Settings", "toolcrib_settings_model", "toolcrib_tools"]

SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


class Settings(BaseModel):
    """``[packs.media]``."""

    model_config = ConfigDict(extra="forbid")

    base_url: str = Field("https://api.openai.com/v1", description="OpenAI-compatible API root")
    api_key_env: str = Field("OPENAI_API_KEY", description="environment variable holding the API key")
    image_models: list[str] = Field(default_factory=list, description="models generate_image may use")
    default_image_model: str | None = Field(None, description="one of image_models")
    timeout: float = Field(120.0, gt=0)
    max_image_bytes: int = Field(10 * 1024 * 1024, gt=0)
    fetch_timeout: float = Field(30.0, gt=0, description="seconds view_image may take to fetch an image URL")
    allow_private_networks: bool = Field(False, description="view_image may also fetch from private addresses")
    allowed_private_hosts: list[str] = Field(default_factory=list, description='"host:port" exceptions')
    link_urls: bool = Field(False, description="view_image answers an image URL with a link to it (checked as an "
                                                "image first), for clients that fetch images themselves")

    @model_validator(mode="after")
    def _default_is_listed(self) -> Settings:
        if self.default_image_model is not None and self.default_image_model not in self.image_models:
            raise ValueError(f"default_image_model {self.default_image_model!r} is not one of image_models")
        return self


def _settings(ctx: Context | AvailabilityContext) -> Settings:
    return ctx.settings if isinstance(ctx.settings, Settings) else Settings()


def _mime(data: bytes) -> str | None:
    for signature, mime in SIGNATURES:
        if data.startswith(signature):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def has_vision(ctx: AvailabilityContext) -> bool | str:
    if "vision" in ctx.capabilities:
        return True
    if ctx.model is None:  # the agent names no model: nothing says it can see
        return 'the agent names no model; one with vision = true ([models."<id>"]) can look at images'
    return f'model {ctx.model!r} has no vision capability ([models."{ctx.model}"] vision = true gives it)'


@toolcrib.tool(annotations={"readOnlyHint": True, "openWorldHint": True}, is_available=has_vision,
               rule_subject="path_or_url")
def view_image(
    path_or_url: Annotated[str, Field(max_length=8192, description="A workspace path, or an http(s) URL")],
    ctx: Context,
) -> Any:
    """Look at an image (PNG, JPEG, GIF, WEBP): a file of the workspace, or an http(s) URL, which is fetched
    (public addresses only, every redirect checked, size and time capped); either comes back as image content."""
    settings = _settings(ctx)
    limit = settings.max_image_bytes
    if urlsplit(path_or_url).scheme in ("http", "https"):
        limits = WebLimits(max_bytes=limit, timeout=settings.fetch_timeout,
                           allow_private_networks=settings.allow_private_networks,
                           allowed_private_hosts=tuple(settings.allowed_private_hosts), where="[packs.media]",
                           headers=(("Accept", "image/*"),))
        got = fetch(path_or_url, limits, lambda hop: ctx.check_rules(path_or_url=hop))
        mime = _mime(got.body)
        if mime is None:
            declared = (got.content_type or "no declared type").split(";")[0]
            raise ToolError(f"{got.url}: not an image this tool shows (PNG, JPEG, GIF or WEBP); it is {declared}")
        if settings.link_urls:  # the client fetches it: the image's bytes stay out of the conversation
            name = urlsplit(got.url).path.rsplit("/", 1)[-1] or got.url
            return toolcrib.ResourceLink(got.url, name, mime, f"an image ({mime}, {len(got.body)} bytes)")
        return toolcrib.Image(got.body, mime)
    parts = parts_of(path_or_url, allow_root=False)
    data, size = Root(ctx.workspace).read_bytes(parts, limit + 1)
    if size > limit:
        raise ToolError(f"{display(parts)}: the image is {size} bytes, more than the limit of {limit}")
    mime = _mime(data)
    if mime is None:
        raise ToolError(f"{display(parts)}: not an image this tool shows (PNG, JPEG, GIF or WEBP)")
    return toolcrib.Image(data, mime)


def image_models_configured(ctx: AvailabilityContext) -> bool | str:
    settings = _settings(ctx)
    if not settings.image_models or settings.default_image_model is None:
        return "no image models are configured ([packs.media] image_models and default_image_model)"
    return True


HINT = ("Use media__view_image to look at an image (a workspace path or a URL), or web__download_file to save a "
        "URL into the workspace.")


@toolcrib.tool(annotations={"readOnlyHint": False, "destructiveHint": False, "openWorldHint": True},
               is_available=image_models_configured, timeout=600)
def generate_image(
    prompt: Annotated[str, Field(min_length=1, max_length=4000, description="What the image should show")],
    ctx: Context,
    model: Annotated[str | None, Field(description="One of the configured image models (default: the default)")]
    = None,
    size: Annotated[str, Field(pattern=r"^\d{2,4}x\d{2,4}$", description="Like 1024x1024")] = "1024x1024",
    n: Annotated[int, Field(ge=1, le=4, description="How many images")] = 1,
) -> str:
    """Generate images from a text prompt with the configured image model. Returns JSON with the image URLs (or
    workspace paths) and a hint on how to look at them."""
    settings = _settings(ctx)
    chosen = model or settings.default_image_model
    if chosen not in settings.image_models:
        raise ToolError(f"model {chosen!r} is not one of the configured image models: "
                        f"{', '.join(settings.image_models)}")
    key = os.environ.get(settings.api_key_env, "")
    body = json.dumps({"model": chosen, "prompt": prompt, "n": n, "size": size}).encode()
    request = urllib.request.Request(settings.base_url.rstrip("/") + "/images/generations", data=body,
                                     headers={"Content-Type": "application/json",
                                              **({"Authorization": f"Bearer {key}"} if key else {})})
    try:
        with urllib.request.urlopen(request, timeout=settings.timeout) as response:
            payload = json.loads(response.read(settings.max_image_bytes * n * 2))
    except urllib.error.HTTPError as exc:
        detail = exc.read(2000).decode("utf-8", errors="replace")
        raise ToolError(f"the image service answered HTTP {exc.code}: {detail}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise ToolError(f"the image service could not be reached: {exc}") from None
    images: list[dict[str, str]] = []
    root = Root(ctx.workspace)
    for i, item in enumerate(payload.get("data") or []):
        if item.get("url"):
            images.append({"url": item["url"]})
        elif item.get("b64_json"):
            try:
                data = base64.b64decode(item["b64_json"], validate=True)
            except (binascii.Error, ValueError):
                raise ToolError("the image service returned invalid base64") from None
            parts = parts_of(f"generated/{int(time.time())}-{i}.{(_mime(data) or 'image/png').split('/')[1]}")
            root.write_bytes(parts, data, create_parents=True, overwrite=False)
            images.append({"path": display(parts)})
    if not images:
        raise ToolError("the image service returned no images")
    return json.dumps({"model": chosen, "images": images, "hint": HINT}, ensure_ascii=False)


@toolcrib.hookimpl
def toolcrib_tools() -> list[Any]:
    return [view_image, generate_image]


@toolcrib.hookimpl
def toolcrib_settings_model() -> type[BaseModel]:
    return Settings

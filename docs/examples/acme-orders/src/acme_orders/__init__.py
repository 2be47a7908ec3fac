"""acme-toolcrib-orders: look up and cancel orders, read them as resources, draft refund answers. The example of
docs/writing-packs.md."""

import json
from typing import Annotated, Any

from pydantic import BaseModel, Field

import toolcrib

ORDERS = {
    "O-1001": {"id": "O-1001", "status": "shipped", "region": "eu"},
    "O-1002": {"id": "O-1002", "status": "open", "region": "us"},
}


class Settings(BaseModel):
    """The operator's [packs.orders] table."""

    region: str | None = None  # only orders of this region are visible
    allow_cancel: bool = False


@toolcrib.tool(annotations={"readOnlyHint": True})
async def lookup_order(
    order_id: Annotated[str, Field(description="Order ID, such as O-1001")],
    ctx: toolcrib.Context,
) -> dict:
    """Look up an order by its ID and return it as JSON."""
    return find_order(order_id, ctx.settings)


def find_order(order_id: str, settings: Settings) -> dict:
    order = ORDERS.get(order_id)
    if order is None or (settings.region and order["region"] != settings.region):
        raise toolcrib.ToolError(f"Order not found: {order_id}")
    return order


def cancelling_allowed(ctx: toolcrib.AvailabilityContext) -> bool | str:
    return True if ctx.settings.allow_cancel else "the operator has not set allow_cancel = true"


@toolcrib.tool(
    annotations={"destructiveHint": True, "idempotentHint": True},
    is_available=cancelling_allowed,
    rule_subject="order_id",
)
def cancel_order(order_id: Annotated[str, Field(pattern=r"^O-\d+$")]) -> str:
    """Cancel an open order. Shipped orders cannot be cancelled."""
    order = ORDERS.get(order_id)
    if order is None:
        raise toolcrib.ToolError(f"Order not found: {order_id}")
    if order["status"] != "open":
        raise toolcrib.ToolError(f"Order {order_id} is {order['status']}; only open orders can be cancelled")
    order["status"] = "cancelled"
    toolcrib.resource_updated(f"orders://{order_id}")  # clients that subscribed to it hear of the change
    return f"Cancelled {order_id}"


def order_ids(prefix: str) -> list[str]:
    return [order_id for order_id in ORDERS if order_id.startswith(prefix)]


@toolcrib.resource("orders://{order_id}", mime_type="application/json", complete={"order_id": order_ids})
def order(order_id: str, ctx: toolcrib.Context) -> dict:
    """An order, by its ID."""
    return find_order(order_id, ctx.settings)


@toolcrib.prompt(complete={"order_id": order_ids})
def refund_request(
    order_id: Annotated[str, Field(description="The order to refund")],
    ctx: toolcrib.Context,
) -> list[toolcrib.Message]:
    """Draft the answer to a customer who asks for a refund."""
    found = json.dumps(find_order(order_id, ctx.settings))
    return [
        toolcrib.Message("user", toolcrib.EmbeddedResource(f"orders://{order_id}", text=found,
                                                           mime_type="application/json")),
        toolcrib.Message("user", f"The customer asks for a refund of order {order_id}. Draft a short, kind answer."),
    ]


@toolcrib.hookimpl
def toolcrib_tools() -> list[Any]:
    return [lookup_order, cancel_order]


@toolcrib.hookimpl
def toolcrib_resources() -> list[Any]:
    return [order]


@toolcrib.hookimpl
def toolcrib_prompts() -> list[Any]:
    return [refund_request]


@toolcrib.hookimpl
def toolcrib_settings_model() -> type[BaseModel]:
    return Settings

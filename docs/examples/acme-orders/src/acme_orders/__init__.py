"""acme-toolcrib-orders: look up and cancel orders. The example of docs/writing-packs.md."""

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
    order = ORDERS.get(order_id)
    if order is None or (ctx.settings.region and order["region"] != ctx.settings.region):
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
    return f"Cancelled {order_id}"


@toolcrib.hookimpl
def toolcrib_tools() -> list[Any]:
    return [lookup_order, cancel_order]


@toolcrib.hookimpl
def toolcrib_settings_model() -> type[BaseModel]:
    return Settings

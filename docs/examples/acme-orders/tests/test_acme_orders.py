"""The pack's own tests, with toolcrib's test kit."""

import acme_orders


def test_conformance(toolcrib_pack):
    kit = toolcrib_pack(acme_orders, namespace="orders", settings={"allow_cancel": True})
    assert kit.problems() == []


def test_lookup(toolcrib_pack):
    kit = toolcrib_pack(acme_orders, namespace="orders")
    assert kit.names == ["orders__lookup_order"]  # cancel_order is unavailable until the operator allows it
    assert kit.call("lookup_order", order_id="O-1001").structured_content == {
        "id": "O-1001", "status": "shipped", "region": "eu"}
    missing = kit.call("lookup_order", order_id="O-42")
    assert (missing.is_error, missing.text) == (True, "Order not found: O-42")


def test_region_setting_hides_other_regions(toolcrib_pack):
    kit = toolcrib_pack(acme_orders, namespace="orders", settings={"region": "us"})
    assert kit.call("lookup_order", order_id="O-1001").text == "Order not found: O-1001"


def test_cancel(toolcrib_pack):
    kit = toolcrib_pack(acme_orders, namespace="orders", settings={"allow_cancel": True})
    assert kit.call("cancel_order", order_id="O-1001").text == (
        "Order O-1001 is shipped; only open orders can be cancelled")
    bad = kit.call("cancel_order", order_id="1001")
    assert bad.text == ("Invalid arguments for orders__cancel_order:\n- order_id: String should match pattern "
                        "'^O-\\d+$' (got '1001')")


def test_order_resource_and_refund_prompt(toolcrib_pack):
    kit = toolcrib_pack(acme_orders, namespace="orders", settings={"region": "eu"})
    assert kit.read("orders://O-1001") == [{"uri": "orders://O-1001", "mimeType": "application/json",
                                           "text": '{"id":"O-1001","status":"shipped","region":"eu"}'}]
    assert kit.complete("orders://{order_id}", "order_id", "O-10") == ["O-1001", "O-1002"]
    messages = kit.prompt("refund_request", order_id="O-1001")["messages"]
    assert [m["content"]["type"] for m in messages] == ["resource", "text"]

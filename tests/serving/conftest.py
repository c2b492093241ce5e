"""Shared fixtures: a tiny card catalog and the real MiniLM encoder (tool routing); a real Redis (gateway state)."""

import pytest

CARDS_YAML = """\
groups:
  - {name: payments, description: "use for charging cards, refunds and payment status"}
  - {name: invoices, description: "use for issuing and reading invoices"}
tools:
  - namespace: payments
    name: get_payment_status
    description: Look up the status of a payment by its id
    risk: read
    permissions: [payments.read]
    parameters: {type: object, properties: {payment_id: {type: string}}, required: [payment_id]}
  - namespace: payments
    name: refund_payment
    description: Refund a captured payment back to the customer's card
    when_to_use: the customer asks for their money back
    risk: irreversible
    permissions: [payments.refund]
  - namespace: payments
    name: charge_card
    description: Charge a customer's credit card
    risk: write
    permissions: [payments.write]
  - {namespace: invoices, name: issue_invoice, description: Issue a new invoice to a customer, risk: write, permissions: [invoices.write]}
  - {namespace: invoices, name: list_invoices, description: List the invoices of a customer, risk: read}
  - {namespace: weather, name: forecast, description: Weather forecast for a city, risk: read, tenants: [acme]}
  - {namespace: ops, name: restart_service, description: Restart a production service, risk: irreversible, environments: [staging]}
  - {namespace: ops, name: service_status, description: Health status of a service, risk: read, health: down}
"""


@pytest.fixture(scope="session")
def encoder():
    from serving.tools.encoder import MiniLMEncoder

    return MiniLMEncoder.load()


def build_tiny_index(encoder, tmp_path_factory):
    """The index of CARDS_YAML, built with `encoder` under fresh temporary folders (for module fixtures)."""
    from serving.tools.catalog import Catalog
    from serving.tools.index import ToolIndex
    from serving.tools.loaders import load_cards

    path = tmp_path_factory.mktemp("cards") / "cards.yaml"
    path.write_text(CARDS_YAML)
    cards, groups = load_cards(path)
    return ToolIndex.build(Catalog(cards, groups), tmp_path_factory.mktemp("index"), encoder=encoder)


@pytest.fixture()
def cards_file(tmp_path):
    p = tmp_path / "cards.yaml"
    p.write_text(CARDS_YAML)
    return p


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory):
    """A real redis-server on loopback (the binary the test extra installs; serving/gateway/redis_local.py)."""
    from serving.gateway.redis_local import LocalRedis

    server = LocalRedis(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()

"""What every door of the gateway shares: API keys and identity (auth), the state store (state and its SQLite
and Redis backends), errors in each API's own shape, money (budget: reservations, charges, the spend report),
the decision record and its log (record, decision_log), and the Prometheus metrics.

The chat gateway (serving/gateway), the MCP gateway (serving/mcp) and the console (serving/console) each use
it; it imports none of them. serving/app.py wires the doors together.
"""

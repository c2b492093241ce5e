"""Serving stage: tool routing (serving/tools), model selection, backends, gateway."""

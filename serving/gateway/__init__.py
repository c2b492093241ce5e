"""The OpenAI-compatible routing gateway (`switchcraft serve`): app, config, request validation, upstreams, metrics.

    switchcraft serve --config configs/serving.yaml
"""

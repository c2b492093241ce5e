"""Serving stage: tool routing (serving/tools), model selection, backends, gateway.

    from serving import RouterClient
    client = RouterClient.from_dir("runs/default/router_onnx")
"""


def __getattr__(name: str):
    # Lazy: `import serving.policy` must not pull in onnxruntime and tokenizers.
    if name == "RouterClient":
        from serving.client import RouterClient

        return RouterClient
    raise AttributeError(f"module 'serving' has no attribute {name!r}")

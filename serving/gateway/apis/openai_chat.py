"""POST /v1/chat/completions: OpenAI Chat Completions, the gateway's own request (no translation).

The body is the internal request; the answer is the chat completion (JSON, JSON
as SSE, or an upstream's stream passed through: serving/gateway/chat.py);
errors are OpenAI's error object. The `Api` defaults describe it.
"""

from __future__ import annotations

from serving.gateway.apis import Api
from serving.gateway.apis.registry import register

API = register(Api())

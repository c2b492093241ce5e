"""Verifier test helpers: a tool's docs in BFCL's shape, a weather tool, and one call checked end to end."""

from __future__ import annotations

from data.schema import Call
from data.sources.bfcl_common import expected_from_ground_truth
from data.tools import tools_from_docs
from data.verify import prepare, verify
from data.verify.reasons import Verdict


def fn(name, props, required=None):
    return {
        "name": name,
        "description": "",
        "parameters": {
            "type": "dict",
            "properties": props,
            "required": list(props) if required is None else required,
        },
    }


WEATHER = fn(
    "weather.get",
    {
        "city": {"type": "string", "description": "City name."},
        "days": {"type": "integer", "description": "Days ahead. Default is 1."},
        "unit": {"type": "string", "description": "Unit. Default is 'celsius'."},
        "detailed": {"type": "boolean", "description": "More detail.", "default": False},
    },
    required=["city"],
)


def check(docs, gt, calls, *, language=None, decode_error=None) -> Verdict:
    tools = tools_from_docs(docs)
    p = prepare(expected_from_ground_truth(gt, tools=tools), tools, language=language)
    return verify(p, calls, decode_error)


def call(name, **args):
    return Call(name=name, arguments=args)

"""`RouterClient`: one interface to route requests, whether the graph runs in-process or behind Triton.

    from serving import RouterClient
    client = RouterClient.from_dir("runs/default/router_onnx")                           # in-process ONNX Runtime
    client = RouterClient.from_dir("runs/default/model_repository", backend="triton-grpc", url="127.0.0.1:8001")
    routed = client.route(messages, tools, Constraints(max_cost_usd=0.001))
    routed.decision.chosen, routed.decision.ranking, routed.latency_ms
    client.probabilities([(messages, tools), ...])                                       # [n, n_models]

Packing and metadata run here, client-side, with the tokenizer and router.json
of the exported folder (why: docs/serving.md); the graph runs on the backend;
the cost-aware policy (serving/policy.py) turns probabilities into the decision.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from serving.backends import Backend, make_backend
from serving.long_input import CappedEncoder
from serving.policy import Constraints, CostAwarePolicy, Decision
from training.novelty import Novelty
from training.policy import Strategy, StrategyPolicy
from training.export import Request, RequestEncoder, pad_batch

log = logging.getLogger(__name__)


def policy_from_info(info: dict[str, Any]) -> CostAwarePolicy:
    """The policy router.json implies: pool order, profiled costs, threshold.

    A model with no profiled cost (no labelled costs) gets the highest known one, so the
    cheapest-confident rule never prefers it for a cost it cannot show.
    """
    models = list(info["models"])
    profile = info.get("cost_profile") or {}
    known = [float(v) for v in profile.values() if v is not None]
    if not known:
        raise ValueError("router.json has no profiled cost for any model; retrain with labels that carry cost_usd")
    missing = [m for m in models if profile.get(m) is None]
    if missing:
        log.warning("no profiled cost for %s; using the highest known (%.6f USD)", missing, max(known))
    costs = {m: float(profile[m]) if profile.get(m) is not None else max(known) for m in models}
    rule = info.get("policy") or {}
    return CostAwarePolicy(models, costs, float(info.get("threshold", 0.5)), rule=rule.get("rule", "threshold"),
                           lam=rule.get("lam"))


def router_version(info: dict[str, Any], raw: bytes) -> str:
    backbone = (info.get("backbone") or {}).get("name", "router")
    return f"{Path(str(backbone)).name}@{hashlib.sha256(raw).hexdigest()[:12]}"


@dataclass
class RoutedDecision:
    """The policy's decision plus what serving adds: router version, latency, exposed tools."""

    decision: Decision
    router_version: str
    latency_ms: float
    backend: str
    n_tokens: int
    tools: list[str] | None = None  # the tools exposed, once a tool router is configured (serving/tools)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {**self.decision.to_dict(), "router_version": self.router_version, "latency_ms": self.latency_ms,
                "backend": self.backend, "n_tokens": self.n_tokens, "tools": self.tools, **self.extra}


class RouterClient:
    """Packing (client-side) + a backend + the cost-aware policy."""

    def __init__(self, encoder: RequestEncoder, backend: Backend, info: dict[str, Any], *, version: str,
                 max_batch_size: int = 32, pad_multiple: int = 1, rule: str | None = None, lam: float | None = None,
                 strategies: bool = True, novelty: Novelty | None = None) -> None:
        if max_batch_size < 1 or pad_multiple < 1:
            raise ValueError("max_batch_size and pad_multiple must be ≥ 1")
        # Long strings are cut to what packing can use before anything is tokenized (serving/long_input.py).
        self.encoder = encoder if isinstance(encoder, CappedEncoder) else CappedEncoder(encoder)
        self.backend, self.info = backend, info
        self.models: list[str] = list(info["models"])
        self.policy = policy_from_info(info)
        if rule is not None or lam is not None:  # the deployment's choice over router.json's
            from dataclasses import replace

            self.policy = replace(self.policy, rule=rule or self.policy.rule, lam=lam if lam is not None else self.policy.lam)
        # The strategy policy `switchcraft reproduce` fitted (router.json's strategy_policy): cascades per request.
        sp = info.get("strategy_policy") if strategies else None
        self.strategy_policy = StrategyPolicy.from_json(sp, source="router.json strategy_policy") if sp else None
        if self.strategy_policy is not None and self.strategy_policy.models != self.models:
            raise ValueError(f"router.json: strategy_policy is over {self.strategy_policy.models}, the router over {self.models}")
        self.version = version
        self.novelty = novelty  # None: every request is routed, however unlike the training requests
        if novelty is not None and novelty.safe_model not in self.models:
            raise ValueError(f"router.json: novelty's safe model {novelty.safe_model!r} is not one of {self.models}")
        self.max_batch_size = max_batch_size
        # Triton's ONNX backend batches only equal shapes: padding lengths to a multiple makes them meet.
        self.pad_multiple = pad_multiple

    @classmethod
    def from_dir(cls, path: str | Path, *, backend: str = "ort", url: str | None = None, int8: bool = False,
                 threads: int | None = None, timeout_s: float = 2.0, max_batch_size: int = 32,
                 pad_multiple: int = 1, spin: bool = False, rule: str | None = None, lam: float | None = None,
                 strategies: bool = True, novelty: bool = True) -> RouterClient:
        """From an exported folder (`switchcraft export`) or a model repository (both hold router.json + tokenizer/)."""
        path = Path(path)
        if not (path / "router.json").exists():
            raise FileNotFoundError(f"{path}: no router.json; export the router first: switchcraft export ROUTER --out DIR")
        raw = (path / "router.json").read_bytes()
        info = json.loads(raw)
        if "onnx" not in info:
            raise ValueError(f"{path}/router.json is a PyTorch router's; export it: switchcraft export {path} --out DIR")
        if int8 and backend == "ort" and not info["onnx"].get("int8"):
            raise FileNotFoundError(f"{path}: no INT8 graph; export with --int8 (an INT8 graph that changes more "
                                    "decisions than export allows is not entered in router.json: see export.json)")
        graph = path / (info["onnx"]["int8"] if int8 else info["onnx"]["fp32"]) if backend == "ort" else None
        engine = make_backend(backend, path=graph, url=url, timeout_s=timeout_s, threads=threads, spin=spin)
        encoder = RequestEncoder.from_dir(path)
        name = f"{backend}{'-int8' if int8 else ''}"
        engine.name = name
        index = Novelty.load(path, info["novelty"]) if novelty and info.get("novelty") else None
        return cls(encoder, engine, info, version=router_version(info, raw), max_batch_size=max_batch_size,
                   pad_multiple=pad_multiple, rule=rule, lam=lam, strategies=strategies, novelty=index)

    # --- probabilities -----------------------------------------------------------------------------
    def _pad_to(self, n: int) -> int:
        # Never past the packing budget: the encoder has no positions beyond it.
        return min(-(-n // self.pad_multiple) * self.pad_multiple, max(n, self.encoder.packing.max_tokens))

    def infer_encoded(self, encoded: Sequence[tuple[list[int], np.ndarray]]) -> np.ndarray:
        """Probabilities of already-packed requests, batched by similar length."""
        out = np.zeros((len(encoded), len(self.models)), dtype=np.float32)
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i][0]))  # little padding per batch
        for start in range(0, len(order), self.max_batch_size):
            rows = order[start : start + self.max_batch_size]
            batch = [encoded[i] for i in rows]
            feed = pad_batch(batch, self.encoder.pad_id, self._pad_to(max(len(ids) for ids, _ in batch)))
            probs = self.backend.infer(feed)
            if probs.shape != (len(rows), len(self.models)):
                raise ValueError(f"backend {self.backend.name} returned shape {probs.shape}, "
                                 f"expected {(len(rows), len(self.models))}: is it serving this router?")
            out[rows] = probs
        return out

    def probabilities(self, requests: Sequence[Request]) -> np.ndarray:
        """[n, n_models] P(correct) in `self.models` order."""
        if not requests:
            return np.zeros((0, len(self.models)), dtype=np.float32)
        return self.infer_encoded([self.encoder.encode(m, t) for m, t in requests])

    # --- decisions ---------------------------------------------------------------------------------
    def route(self, messages: list[Any], tools: list[Any] | None, constraints: Constraints | None = None, *,
              threshold: float | None = None) -> RoutedDecision:
        return self.route_batch([(messages, tools)], constraints, threshold=threshold)[0]

    def route_batch(self, requests: Sequence[Request], constraints: Constraints | None = None, *,
                    threshold: float | None = None) -> list[RoutedDecision]:
        t0 = time.perf_counter()
        encoded = [self.encoder.encode(m, t) for m, t in requests]
        probs = self.infer_encoded(encoded)
        decisions = [self.decide(p, constraints, threshold=threshold, novelty=self.novelty_of(e))
                     for p, e in zip(probs, encoded)]
        ms = (time.perf_counter() - t0) * 1e3
        return [RoutedDecision(d, self.version, ms, self.backend.name, len(ids)) for d, (ids, _) in zip(decisions, encoded)]

    def novelty_of(self, encoded: tuple[list[int], np.ndarray]) -> dict[str, float] | None:
        """How unlike the training requests an encoded request (ids, metadata) is: its text and metadata distances
        and their score (None: this router has no novelty index)."""
        return None if self.novelty is None else self.novelty.parts(*encoded)

    def decide(self, probs: np.ndarray, constraints: Constraints | None = None, *,
               threshold: float | None = None, novelty: dict[str, float] | None = None) -> Decision:
        """One request's decision from its probabilities: the policy, then the strategy policy (unless τ is given);
        a request whose `novelty` (novelty_of) is over the index's threshold goes to the safe model instead.

        Per request, so requests with different constraints can share one inference call (serving/gateway/batcher.py).
        Raises NoEligibleModel when the constraints leave no model."""
        decision = self.policy.decide(probs, constraints, threshold=threshold)
        if self.strategy_policy is not None and threshold is None:
            self._choose_strategy(decision, probs, constraints)
        if novelty is not None and self.novelty is not None:
            self._unlike_training(decision, novelty, threshold)
        return decision

    def _unlike_training(self, decision: Decision, parts: dict[str, float], threshold: float | None) -> None:
        """Over the threshold, the safe model (the most accurate single model on the training labels) answers, its
        fallbacks the ranking's: the router's probabilities there are extrapolation. A caller's τ, or constraints
        that exclude the safe model, keep the decision; the decision says which happened."""
        nv, score = self.novelty, parts["score"]
        note = {**{k: round(v, 4) for k, v in parts.items()}, "threshold": round(nv.threshold, 4),
                "safe_model": nv.safe_model, "flagged": score > nv.threshold, "applied": False}
        decision.novelty = note
        if not note["flagged"]:
            return
        if threshold is not None:
            note["why"] = "the request gave its own threshold: routed as asked"
            return
        if nv.safe_model in decision.excluded:
            note["why"] = f"the safe model is excluded: {decision.excluded[nv.safe_model]}"
            return
        fallbacks = tuple(m for m in decision.ranking if m != nv.safe_model)
        decision.chosen, decision.ranking = nv.safe_model, [nv.safe_model, *fallbacks]
        decision.strategy = Strategy.single(nv.safe_model, fallbacks)
        decision.strategy_why = {"rule": "novelty", "why": f"unlike the router's training requests (novelty "
                                 f"{score:.3f} > {nv.threshold:.3f}): the pool's safe model answers"}
        note["applied"] = True

    def _choose_strategy(self, decision: Decision, probs: np.ndarray, constraints: Constraints | None) -> None:
        """Replace the single decision's strategy with the strategy policy's, where the caller's constraints allow.

        A caller's min_probability asks for per-model confidence, which a cascade does not give: the single
        decision stands. allowed_models and max_cost_usd narrow the menu.
        """
        c = constraints or Constraints()
        if c.min_probability is not None:
            decision.strategy_why = {"rule": "single", "why": "min_probability asks for one model's confidence"}
            return
        chosen = self.strategy_policy.strategy_for(probs, allowed=c.allowed_models, max_cost_usd=c.max_cost_usd)
        if chosen is None:
            decision.strategy_why = {"rule": "single", "why": "no strategy on the menu fits the constraints"}
            return
        decision.strategy, decision.strategy_why = chosen

    def ready(self) -> bool:
        return self.backend.ready()

    def close(self) -> None:
        self.backend.close()

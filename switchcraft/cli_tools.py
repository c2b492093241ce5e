"""`switchcraft tools …`: build a catalog index, route one request, evaluate tool routing.

    switchcraft tools index --config configs/tools.yaml [--catalog cards.yaml ...]
    switchcraft tools route --catalog cards.yaml --request "refund order 42" --tenant acme --role support
    switchcraft tools eval [--bench bfcl --limit 500] [--run-dir runs/tools]
    switchcraft tools eval --set retrieval.max_intents=1 --set retrieval.query_token_budget=32 --run-dir runs/tools_fast
    switchcraft tools train [--set train.epochs=2]   # fine-tune the retriever → runs/tools_retriever/
    switchcraft tools fit-fusion                     # BM25/dense weights on training queries → runs/tools_retriever/fusion.json
    switchcraft tools value [--retriever base]       # recorded thousand-tools accuracy with and without the router → value.md

Thin wrappers over `serving.tools`, `training.tool_retriever`, `evaluation.tools.pairs`, `evaluation.tools.evaluate` and
`evaluation.tools.value`.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from data.errors import DataError
from switchcraft.console import fail

DEFAULT_CONFIG = Path("configs/tools.yaml")


SET_HELP = "Override a config value, e.g. retrieval.max_intents=1 (repeatable)."


def _load(config: Path | None, overrides: list[str] | None):
    from serving.tools.config import load_tools_config

    path = config or (DEFAULT_CONFIG if DEFAULT_CONFIG.exists() else None)
    return load_tools_config(path, overrides or ())


def _config(config: Path | None, catalog: list[str] | None, index_dir: str | None, default_risk: str | None,
            overrides: list[str] | None = None):
    cfg = _load(config, overrides)
    update = {}
    if catalog:
        update["catalog"] = list(catalog)
    if index_dir:
        update["index_dir"] = index_dir
    if default_risk:
        update["default_risk"] = default_risk
    cfg = cfg.model_copy(update=update)
    if not cfg.catalog:
        fail("no catalog: give --catalog FILE (repeatable) or list files under `catalog:` in the config")
    return cfg


def _request_text(request: str) -> str:
    """The request as text: a literal, or a JSON file holding a query or OpenAI-style messages."""
    p = Path(request)
    if not (p.suffix == ".json" and p.exists()):
        return request
    doc = json.loads(p.read_text())
    if isinstance(doc, dict) and isinstance(doc.get("query"), str):
        return doc["query"]
    msgs = doc.get("messages") if isinstance(doc, dict) else doc
    users = [m.get("content") for m in msgs or [] if isinstance(m, dict) and m.get("role") == "user" and m.get("content")]
    if not users:
        raise DataError("no user message", path=p, field="messages", hint='give {"query": "..."} or {"messages": [...]}')
    return users[-1]


def _one_blas_thread():
    """Routing does one matrix-vector product per request; BLAS threads only spin on a busy
    2-core machine (measured: 28 ms → 9 ms per route with one thread under load)."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(1)


def index_cmd(
    config: Path = typer.Option(None, help="Tools config (default configs/tools.yaml when present)."),
    catalog: list[str] = typer.Option(None, "--catalog", "-c", help="Catalog file (repeatable); overrides the config."),
    index_dir: str = typer.Option(None, help="Where indexes go (default from the config: runs/tools/index)."),
    default_risk: str = typer.Option(None, help="Risk of cards that do not say: read, write, irreversible."),
    overrides: list[str] = typer.Option(None, "--set", metavar="KEY=VALUE", help=SET_HELP),
) -> None:
    """Build (or find cached) the versioned index of a catalog: embeddings, groups, schema tokens."""
    from serving.tools.catalog import Catalog
    from serving.tools.index import ToolIndex

    try:
        cfg = _config(config, catalog, index_dir, default_risk, overrides)
        cat = Catalog.from_files(cfg.catalog, default_risk=cfg.default_risk, duplicates=cfg.duplicates)
        idx = ToolIndex.from_config(cat, cfg)
    except (DataError, FileNotFoundError) as e:
        fail(str(e))
    typer.echo(json.dumps({"catalog_version": cat.version, "tools": len(cat), "groups": len(cat.group_names()),
                           "index": str(idx.index_dir), "build_seconds": round(idx.build_seconds, 2)}, indent=2))

def route_cmd(
    request: str = typer.Option(..., "--request", "-r", help="The request text, or a JSON file with query/messages."),
    config: Path = typer.Option(None, help="Tools config (default configs/tools.yaml when present)."),
    catalog: list[str] = typer.Option(None, "--catalog", "-c", help="Catalog file (repeatable); overrides the config."),
    index_dir: str = typer.Option(None, help="Index directory (embeddings cached per catalog version)."),
    tenant: str = typer.Option("", help="Caller's tenant."),
    role: list[str] = typer.Option(None, "--role", help="Caller's role (repeatable)."),
    permission: list[str] = typer.Option(None, "--permission", help="Permission granted directly (repeatable)."),
    environment: str = typer.Option("prod", help="Caller's environment."),
    top_k: int = typer.Option(None, help="Override retrieval.top_k."),
    default_risk: str = typer.Option(None, help="Risk of cards that do not say."),
    overrides: list[str] = typer.Option(None, "--set", metavar="KEY=VALUE", help=SET_HELP),
) -> None:
    """Route one request: exposed tools, groups and confidence, what the filter hid and why, version, timings."""
    from serving.tools.policy import Caller
    from serving.tools.router import ToolRouter

    try:
        cfg = _config(config, catalog, index_dir, default_risk, overrides)
        with _one_blas_thread():
            router = ToolRouter.from_config(cfg)
            caller = Caller(tenant=tenant, roles=role or (), permissions=permission or (), environment=environment)
            decision = router.route(_request_text(request), caller, top_k_override=top_k)
    except (DataError, FileNotFoundError, ValueError) as e:
        fail(str(e))
    typer.echo(json.dumps(decision.to_dict(), indent=2))

def train_cmd(
    data_root: str = typer.Option("../shared/data", help="The shared data folder."),
    config: Path = typer.Option(None, help="Tools config; its `train:` section (default configs/tools.yaml)."),
    index: bool = typer.Option(True, help="Then build the configured catalog's index with the trained encoder."),
    overrides: list[str] = typer.Option(None, "--set", metavar="KEY=VALUE", help=SET_HELP),
) -> None:
    """Fine-tune the retriever on training-only query → tool pairs (MNRL, BM25 hard negatives); write train.out_dir."""
    from evaluation.tools.pairs import heldout_texts, training_asks, training_pairs
    from serving.tools.encoder import default_model_dir
    from training.tool_retriever import fit

    try:
        cfg = _load(config, overrides)
        pairs, counts = training_pairs(data_root, cfg.train.data, log=typer.echo)
        asks = training_asks(pairs, cfg.retrieval.max_intents, heldout_texts(data_root)) if cfg.train.query_layers else []
        out = fit(pairs, cfg.train, cfg.train.base_model or default_model_dir(), log=typer.echo, distil_texts=asks)
    except (DataError, KeyError, ValueError) as e:
        fail(str(e))
    record = json.loads((out / "train.json").read_text())
    record["data"] = counts
    (out / "train.json").write_text(json.dumps(record, indent=2))
    typer.echo(f"wrote {out}; use it with `encoder: {out / 'model'}` in the tools config")
    if index and cfg.catalog:
        from serving.tools.catalog import Catalog
        from serving.tools.index import ToolIndex

        trained = cfg.model_copy(update={"encoder": str(out / "model")})
        cat = Catalog.from_files(cfg.catalog, default_risk=cfg.default_risk, duplicates=cfg.duplicates)
        idx = ToolIndex.from_config(cat, trained)
        typer.echo(f"index of {len(cat)} tools with the trained encoder: {idx.index_dir}")

def fit_fusion_cmd(
    data_root: str = typer.Option("../shared/data", help="The shared data folder."),
    config: Path = typer.Option(None, help="Tools config (default configs/tools.yaml)."),
    retriever: str = typer.Option("trained", help="trained (the config's encoder) or base."),
    run_dir: str = typer.Option(None, help="Index and embedding cache (default from the config: runs/tools)."),
    fields: str = typer.Option("bm25", help="Per-field rankings to weight after the grid: bm25, dense, "
                               "bm25,dense, or '' (none)."),
    siblings: bool = typer.Option(True, help="Then choose sibling fill per benchmark catalog (on training queries; "
                                  "cross-fitted where a catalog has none): fusion.json's sibling_fill."),
    overrides: list[str] = typer.Option(None, "--set", metavar="KEY=VALUE", help=SET_HELP),
) -> None:
    """Grid-search w_bm25 and rrf_k, then per-field weights, on training queries only; write <train.out_dir>/fusion[_base].json."""
    from evaluation.tools.evaluate import retrievers_of
    from evaluation.tools.fusion import fit_fusion, parse_fields, write_fusion
    from evaluation.tools.sibling_fit import config_lines, fit_sibling_fill

    try:
        signals = parse_fields(fields)
        cfg = _load(config, overrides)
        dirs = retrievers_of(cfg, [retriever])[retriever]
        with _one_blas_thread():
            result = fit_fusion(cfg, data_root, run_dir or cfg.run_dir, *dirs, log=typer.echo, fields=signals)
            if siblings:
                result["sibling_fill"] = fit_sibling_fill(cfg, data_root, run_dir or cfg.run_dir, *dirs, log=typer.echo)
    except (DataError, KeyError, FileNotFoundError, ValueError) as e:
        fail(str(e))
    path = write_fusion(result, Path(cfg.train.out_dir) / ("fusion.json" if retriever == "trained" else "fusion_base.json"))
    typer.echo(json.dumps({k: result[k] for k in ("w_bm25", "w_dense", "rrf_k", "score", "score_of_config")}))
    if "fields" in result:
        f = result["fields"]
        typer.echo(json.dumps({k: f[k] for k in ("w_bm25", "rrf_k", "w_bm25_fields", "w_dense_fields", "score")}))
        for s in f["steps"]:
            typer.echo(f"  {s['step']}: {s['score']:.4f}" + (f" ({s['gain']:+.4f})" if "gain" in s else ""))
    if "sibling_fill" in result:
        typer.echo("sibling fill per catalog (catalog_retrieval: in the tools config; catalogs left off: off):\n"
                   + "\n".join(["catalog_retrieval:", *config_lines(result["sibling_fill"])]))
    typer.echo(f"wrote {path}; set retrieval.w_bm25 / rrf_k (and w_bm25_fields / w_dense_fields from `fields`) "
               "in the tools config to use them")

def fit_siblings_cmd(
    bench: list[str] = typer.Option(None, "--bench", "-b", help="Benchmark catalogs (default all)."),
    data_root: str = typer.Option("../shared/data", help="The shared data folder."),
    run_dir: str = typer.Option("runs/tools", help="Index and embedding cache."),
    config: Path = typer.Option(None, help="Tools config (default configs/tools.yaml)."),
    paired: bool = typer.Option(False, help="Held out: each catalog's configured sibling fill against off, paired "
                                "(catalog_retrieval in the config, or --set catalog_retrieval.<name>."
                                "sibling_fill.head=…)."),
    overrides: list[str] = typer.Option(None, "--set", metavar="KEY=VALUE", help=SET_HELP),
) -> None:
    """Choose sibling fill per benchmark catalog on training queries (or, --paired, score it held out)."""
    from evaluation.tools.sibling_fit import BENCHES, config_lines, fit_sibling_fill, paired_heldout

    try:
        cfg = _load(config, overrides)
        benches = tuple(bench or BENCHES)
        with _one_blas_thread():
            if paired:
                typer.echo(json.dumps(paired_heldout(cfg, data_root, run_dir, cfg.encoder, cfg.query_encoder,
                                                     benches), indent=2))
                return
            out = fit_sibling_fill(cfg, data_root, run_dir, cfg.encoder, cfg.query_encoder, benches)
    except (DataError, KeyError, FileNotFoundError, ValueError) as e:
        fail(str(e))
    typer.echo(json.dumps(out, indent=2, default=str))
    typer.echo("\n".join(["catalog_retrieval:", *config_lines(out)]))

def eval_cmd(
    bench: list[str] = typer.Option(None, "--bench", "-b", help="bfcl, metatool, seal_tools, stabletoolbench (default all)."),
    data_root: str = typer.Option("../shared/data", help="The shared data folder."),
    run_dir: str = typer.Option(None, help="Where report.md, CSVs and the plot go (default from the config: runs/tools)."),
    config: Path = typer.Option(None, help="Tools config: retrieval and group settings (the catalog is the benchmark's)."),
    limit: int = typer.Option(None, help="Sample at most this many queries per benchmark."),
    security: bool = typer.Option(True, help="Run the adversarial permission check."),
    retriever: list[str] = typer.Option(None, "--retriever", help="base, trained (default: both, trained when "
                                        "the config names an encoder); the report shows all evaluated into run-dir."),
    overrides: list[str] = typer.Option(None, "--set", metavar="KEY=VALUE", help=SET_HELP),
) -> None:
    """Evaluate base and trained retrievers on held-out BFCL, MetaTool, Seal-Tools, StableToolBench; write the report."""
    from evaluation.tools.evaluate import evaluate

    try:
        cfg = _load(config, overrides)
        out = run_dir or cfg.run_dir
        with _one_blas_thread():
            evaluate(bench or ["bfcl", "metatool", "seal_tools", "stabletoolbench"], data_root, out, cfg, limit,
                     security, log=typer.echo, retrievers=retriever or None)
    except (DataError, KeyError, FileNotFoundError) as e:
        fail(str(e))
    typer.echo(f"wrote {Path(out) / 'report.md'}")

def value_cmd(
    data_root: str = typer.Option("../shared/data", help="The shared data folder (bfcl_v4_outputs/thousand_tools)."),
    run_dir: str = typer.Option(None, help="Where value.md / value.json go (default from the config: runs/tools)."),
    config: Path = typer.Option(None, help="Tools config: retrieval and group settings, encoder."),
    retriever: str = typer.Option("trained", help="trained (the config's encoder) or base (all-MiniLM-L6-v2)."),
    pool: list[int] = typer.Option(None, "--pool", help="Recorded distractor counts to tabulate (default 128, 512)."),
    prices: str = typer.Option("../shared/data/bfcl_v1_prices_2024-08.json",
                               help="Prices JSON (models.<name>.input_per_mtok); '' for none."),
    price: list[str] = typer.Option(None, "--price", metavar="MODEL=USD", help="USD per million input tokens "
                                    "for a model the prices file lacks (repeatable)."),
    predictions: str = typer.Option(None, help="Folder of per-query predictions_<model>_pool<N>.jsonl files "
                                    "(test_id → called function) to check the estimate per query."),
    limit: int = typer.Option(None, help="At most this many questions per category (a quick look)."),
    overrides: list[str] = typer.Option(None, "--set", metavar="KEY=VALUE", help=SET_HELP),
) -> None:
    """Accuracy and prompt tokens of each recorded model × category with N offered tools vs the router in front."""
    from evaluation.tools.value import read_prices, run

    try:
        cfg = _load(config, overrides)
        if retriever == "base":
            cfg = cfg.model_copy(update={"encoder": None, "query_encoder": None})
        elif retriever != "trained":
            fail(f"--retriever {retriever!r}: base or trained")
        if cfg.encoder and not (Path(cfg.encoder) / "model.safetensors").exists():
            fail(f"encoder: {cfg.encoder} holds no trained retriever; build it with `make tools-train` "
                  "(switchcraft tools train, ~48 min on 2 cores), or pass --retriever base")
        out = run_dir or cfg.run_dir
        with _one_blas_thread():
            result = run(data_root, out, cfg, read_prices(prices or None, price or []), tuple(pool or (128, 512)),
                         predictions, limit, log=typer.echo)
    except (DataError, KeyError, FileNotFoundError, ValueError) as e:
        fail(str(e))
    _refresh_report(Path(out))
    for r in result["rows"]:
        typer.echo(f"{r['model']} {r['category']} {r['distractors']}: {100 * r['acc_without']:.1f}% → "
                   f"{100 * r['acc_router']:.1f}% [{100 * r['acc_router_ci'][0]:.1f}, {100 * r['acc_router_ci'][1]:.1f}]; "
                   f"tokens {r['tokens_without']:,.0f} → {r['tokens_router']:,.0f}")
    typer.echo(f"wrote {Path(out) / 'value.md'}")


def register(app: typer.Typer) -> None:
    tools_app = typer.Typer(help="Tool routing: catalog index, routing, evaluation.", no_args_is_help=True)
    app.add_typer(tools_app, name="tools")
    tools_app.command("index")(index_cmd)
    tools_app.command("route")(route_cmd)
    tools_app.command("train")(train_cmd)
    tools_app.command("fit-fusion")(fit_fusion_cmd)
    tools_app.command("fit-siblings")(fit_siblings_cmd)
    tools_app.command("eval")(eval_cmd)
    tools_app.command("value")(value_cmd)


def _refresh_report(run_dir: Path) -> None:
    """Rewrite report.md with the value section when a `tools eval` already wrote its metrics there."""
    metrics = run_dir / "metrics.json"
    if metrics.exists():
        from evaluation.tools.report import write_report

        write_report(json.loads(metrics.read_text()), run_dir)

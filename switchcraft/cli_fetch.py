"""`switchcraft data fetch`: download the public benchmark files from their upstream repositories.

    switchcraft data fetch --dest downloads                        # every source
    switchcraft data fetch --dest downloads --source confetti      # one source
    switchcraft data fetch --dest downloads --dry-run              # print the plan only
    switchcraft ingest --all --data-root downloads                 # then read them

Files come from raw GitHub URLs at the commits recorded in the shared
data's README.md and PROVENANCE.md files, and land in the layout the
adapters read (`<dest>/bfcl_v1/questions/simple.jsonl`, …). Existing files
are kept unless --force. Anything that could not be downloaded is listed
with its URL and target, so it can be fetched by hand.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import typer

RAW_GITHUB = "https://raw.githubusercontent.com"
GORILLA = ("ShishirPatil/gorilla", "e8c9c5a9ef15e60d9ea725f578c4b4959f0fb37b")
CONFETTI = ("amazon-science/confetti", "1fe163c0aba25d192e2c57cb31ade246a217f0cf")
LLAMA_FACTORY = ("hiyouga/LLaMA-Factory", "a0d44c650a9a38c1ec6c8fc48a7daeacca9900a9")
XLAM_COPY = ("supyuxiang/hidden_probing", "1491887691cbe5f5617d7213520bbd3521162c24")
BFCL_V1_CATEGORIES = [
    "simple", "multiple_function", "parallel_function", "parallel_multiple_function", "java", "javascript",
    "relevance", "executable_simple", "executable_multiple_function", "executable_parallel_function",
    "executable_parallel_multiple_function",
]
# Sources with no upstream file to fetch here, and where they come from instead.
ELSEWHERE = {
    "bfcl_v4": "the PyPI package: pip install --no-deps bfcl-eval",
    "hermes": "the Hugging Face hub: ingest --source hermes --path NousResearch/hermes-function-calling-v1",
}


@dataclass(frozen=True)
class Download:
    source: str
    url: str
    target: Path
    page: str  # the file on github.com, for a person to open


def _file(source: str, repo: tuple[str, str], path: str, target: str, dest: Path, base: str) -> Download:
    name, commit = repo
    url = f"{base.rstrip('/')}/{name}/{commit}/{path}"
    return Download(source, url, dest / target, f"https://github.com/{name}/blob/{commit}/{path}")


def plan(dest: Path, sources: list[str] | None = None, base: str = RAW_GITHUB) -> list[Download]:
    """Which upstream file goes where, for the named sources (default: all)."""
    bfcl = "berkeley-function-call-leaderboard/data"
    files = []
    for cat in BFCL_V1_CATEGORIES:
        upstream = f"gorilla_openfunctions_v1_test_{cat}.json"
        files.append(_file("bfcl_v1", GORILLA, f"{bfcl}/{upstream}", f"bfcl_v1/questions/{cat}.jsonl", dest, base))
        if cat != "relevance" and not cat.startswith("executable_"):  # these carry no answer file
            files.append(_file("bfcl_v1", GORILLA, f"{bfcl}/possible_answer/{upstream}",
                               f"bfcl_v1/possible_answer/{cat}.jsonl", dest, base))
    for name in ("BFCL_v2_conversationsclean.json", "BFCL_v2_dialogacts.json"):
        files.append(_file("confetti", CONFETTI, f"data/{name}", f"confetti/{name}", dest, base))
        files.append(_file("confetti", CONFETTI, f"data/possible_answer/{name}", f"confetti/possible_answer/{name}", dest, base))
    files.append(_file("glaive", LLAMA_FACTORY, "data/glaive_toolcall_en_demo.json",
                       "glaive/glaive_toolcall_en_demo.json", dest, base))
    # xLAM itself is gated on the hub; this copy keeps its rows unchanged (ids 57–59,942, multi-call rows only).
    for split in ("train", "test"):
        files.append(_file("xlam", XLAM_COPY, f"data/tool/xlam_{split}.json", f"xlam/xlam_{split}.json", dest, base))
    known = {d.source for d in files} | set(ELSEWHERE)
    unknown = sorted(set(sources or []) - known)
    if unknown:
        raise ValueError(f"unknown source(s) {unknown}; known: {', '.join(sorted(known))}")
    return [d for d in files if not sources or d.source in sources]


def download(files: list[Download], *, force: bool = False, timeout: float = 60.0) -> list[tuple[Download, str]]:
    """Fetch each file (atomically: a partial download never looks finished); return the failures."""
    import httpx

    failed = []
    with httpx.Client(timeout=timeout, follow_redirects=True) as client:
        for d in files:
            if d.target.exists() and not force:
                continue
            try:
                r = client.get(d.url)
                r.raise_for_status()
            except httpx.HTTPError as e:
                failed.append((d, f"{type(e).__name__}: {e}"))
                continue
            d.target.parent.mkdir(parents=True, exist_ok=True)
            tmp = d.target.with_name(d.target.name + ".part")
            tmp.write_bytes(r.content)
            tmp.replace(d.target)
    return failed


def manual_instructions(failed: list[tuple[Download, str]]) -> str:
    lines = [f"could not download {len(failed)} file(s); fetch them by hand (URL -> target):"]
    for d, why in failed:
        lines += [f"  {d.url} -> {d.target}", f"      ({why}; the file upstream: {d.page})"]
    return "\n".join(lines)


def fetch(
    dest: Path = typer.Option(..., help="Where the files go (a data root; the shared one is read-only)."),
    source: list[str] = typer.Option([], "--source", "-s", help="Only these sources (repeatable)."),
    base_url: str = typer.Option(RAW_GITHUB, help="Raw-file server (a mirror)."),
    force: bool = typer.Option(False, help="Download again even if the target exists."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan and exit."),
) -> None:
    """Download the public data sets' files from their upstream repositories at the recorded commits."""
    try:
        files = plan(dest, source or None, base_url)
    except ValueError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    for d in files:
        typer.echo(f"{d.source:9} {d.url} -> {d.target}")
    for name, where in ELSEWHERE.items():
        if not source or name in source:
            typer.echo(f"{name:9} not fetched here: {where}")
    if dry_run:
        return
    failed = download(files, force=force)
    if failed:
        typer.echo(manual_instructions(failed), err=True)
        raise typer.Exit(1)
    typer.echo(f"done: {len(files)} file(s) in {dest}")


def register(app: typer.Typer) -> None:
    """Add `fetch` to the app's `data` group (created here if the app has none)."""
    group = next((g.typer_instance for g in app.registered_groups if g.name == "data"), None)
    if group is None:
        group = typer.Typer(help="Fetch the public data sets.", no_args_is_help=True)
        app.add_typer(group, name="data")
    group.command("fetch")(fetch)

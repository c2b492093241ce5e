"""Amazon ConFETTI (conversational function calling), in BFCL v2 layout.

    switchcraft ingest --source confetti --option questions=/path/to/BFCL_v2_conversationsclean.json

Only the answers are vendored (`../shared/data/confetti/possible_answer/`);
the question files are not (see that folder's PROVENANCE.md). Give one or
more with `questions=FILE[,FILE]`, or put them in the location folder
(`switchcraft data fetch` does); each is joined with the answer file of the
same name under `<location>/possible_answer/`. Question rows: `id`,
`dialog_id`, `question` (the conversation so far: `{role, content,
content_type}` turns), `function` (the API docs in scope).

- `conversationsclean`: BFCL ground truth (`[{fn: {param: [values]}}]`).
- `dialogacts`: the agent's dialog acts for the turn (`agent_function_calling`,
  `agent_seek_information`, …) and `ground_truth_content`, Python call strings
  whose values are lists of acceptable values, then the reply text. A turn
  with no `agent_function_calling` act expects no call.
Category = the file's name without `BFCL_v2_`.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from data.errors import DataError, SourceUnavailable
from data.io import iter_json_rows, local_dir
from data.pycall import PyCallError, parse_calls
from data.schema import Example, Expected, Message
from data.sources import ADAPTERS, IngestReport
from data.sources.bfcl_common import expected_from_ground_truth
from data.tools import tools_from_docs

SOURCE = "confetti"
UPSTREAM = "https://github.com/amazon-science/confetti/tree/1fe163c0aba25d192e2c57cb31ade246a217f0cf/data"
ROLES = {"user": "user", "assistant": "assistant", "agent": "assistant", "system": "system", "tool": "tool", "function": "tool"}
# `book_flight(class=['Economy'])`: a Python keyword as an argument name is not Python syntax.
_KEYWORD_ARG = re.compile(r"([(,]\s*)(" + "|".join(keyword.kwlist) + r")\s*=")
_KW_SUFFIX = "__kw"


@ADAPTERS.register(SOURCE)
def read_confetti(location: str, report: IngestReport, questions: str | list[str] | None = None) -> Iterator[Example]:
    root = local_dir(location)
    files = [Path(q) for q in (questions.split(",") if isinstance(questions, str) else questions or [])]
    # `switchcraft data fetch` puts the question files next to possible_answer/.
    files = files or sorted(root.glob("BFCL_v2_*.json"))
    if not files:
        raise SourceUnavailable(
            "no question file here: BFCL_v2_conversationsclean.json and BFCL_v2_dialogacts.json are missing",
            path=location,
            hint=f"download them from {UPSTREAM} (or run `switchcraft data fetch --source confetti`) "
            "into that folder, or pass --option questions=FILE[,FILE]",
        )
    for qfile in files:
        if not qfile.is_file():
            raise SourceUnavailable("question file not found", path=qfile, hint=f"download {qfile.name} from {UPSTREAM}")
        afile = root / "possible_answer" / qfile.name
        if not afile.is_file():
            raise DataError(f"no answer file for {qfile.name}", path=afile, hint="point the source path at the confetti folder")
        category = qfile.stem.removeprefix("BFCL_v2_")
        answers = {row.get("id"): (line, row) for line, row in iter_json_rows(afile)}
        for line, row in iter_json_rows(qfile):
            qid = row.get("id")
            if qid not in answers:
                report.skip(SOURCE, f"{category}: no answer for id")
                continue
            try:
                tools = tools_from_docs(row.get("function"))
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                raise DataError(f"bad function doc: {e}", path=qfile, line=line, field="function") from None
            ans_line, ans = answers[qid]
            meta = {"dialog_id": row.get("dialog_id")}
            if "ground_truth_content" in ans:
                meta["dialog_acts"] = ans.get("ground_truth")
                expected = _from_dialog_acts(ans, tools, afile, ans_line)
            else:
                expected = expected_from_ground_truth(ans.get("ground_truth"), tools=tools, path=afile, line=ans_line)
            if expected is None:
                report.skip(SOURCE, f"{category}: function-calling act without a call")
                continue
            yield Example(
                id=f"{SOURCE}:{qid}",
                source=SOURCE,
                category=category,
                messages=_messages(row.get("question"), qfile, line),
                tools=tools,
                expected=expected,
                meta=meta,
            )


def _messages(question: Any, path: Path, line: int) -> list[Message]:
    nested = isinstance(question, list) and question and all(isinstance(q, list) for q in question)
    turns = [t for q in question for t in q] if nested else question  # BFCL v3 style: one list per turn
    if not isinstance(turns, list) or not turns:
        raise DataError("question must be a non-empty list of {role, content, content_type}", path=path, line=line, field="question")
    out = []
    for i, t in enumerate(turns):
        if not isinstance(t, dict) or t.get("role") not in ROLES:
            raise DataError(f"role must be one of {sorted(ROLES)}", path=path, line=line, field=f"question[{i}].role")
        role, content = ROLES[t["role"]], t.get("content")
        if role == "assistant" and "call" in str(t.get("content_type", "")) and isinstance(content, str):
            try:  # an earlier call of the agent, written as BFCL call syntax
                out.append(Message(role=role, tool_calls=parse_calls(content)))
                continue
            except PyCallError:
                pass
        out.append(Message(role=role, content=content if isinstance(content, str) or content is None else str(content)))
    return out


def _from_dialog_acts(ans: dict, tools: list, path: Path, line: int) -> Expected | None:
    acts, contents = ans.get("ground_truth"), ans.get("ground_truth_content")
    if not isinstance(acts, list) or not isinstance(contents, list):
        raise DataError("ground_truth and ground_truth_content must be lists", path=path, line=line, field="ground_truth")
    if "agent_function_calling" not in acts:
        return Expected.nothing()
    names = {t.name for t in tools}
    gt = []
    for text in contents:
        try:
            calls = parse_calls(_KEYWORD_ARG.sub(rf"\1\2{_KW_SUFFIX}=", text))
        except PyCallError:
            continue  # the reply text that follows the calls
        for c in calls:
            # Dialog-act files write `Api.method`; the function docs may say `Api_method`.
            name = c.name.replace(".", "_") if c.name not in names and c.name.replace(".", "_") in names else c.name
            gt.append({name: {k.removesuffix(_KW_SUFFIX): v if isinstance(v, list) else [v] for k, v in c.arguments.items()}})
    return expected_from_ground_truth(gt, tools=tools, path=path, line=line) if gt else None

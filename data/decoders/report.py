"""How well the decoders read a set of outputs: rate by format, by model, top failure reasons.

    switchcraft decode-report --out runs/default/decode_report

Written as markdown (`decode_report.md`) and CSV (`decode_by_model.csv`,
`decode_by_decoder.csv`, `decode_failures.csv`).
"""

from __future__ import annotations

import csv
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from data.schema import Output

_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
_NUMBER = re.compile(r"\d+")


def failure_reason(error: str) -> str:
    """An error with its specifics (quoted snippets, numbers) blanked, so equal causes group."""
    return _NUMBER.sub("N", _QUOTED.sub("'…'", error))[:160]


@dataclass
class DecodeReport:
    total: int = 0
    decoded: int = 0
    seconds: float = 0.0
    by_decoder: Counter = field(default_factory=Counter)  # decoder -> outputs decoded
    by_model: dict[str, Counter] = field(default_factory=dict)  # model -> {"outputs", "decoded", <decoder>...}
    errors_by_kind: Counter = field(default_factory=Counter)  # no_call / malformed -> outputs
    reasons: Counter = field(default_factory=Counter)  # failure_reason -> outputs

    @classmethod
    def of(cls, outputs: list[Output], seconds: float = 0.0) -> DecodeReport:
        rep = cls(seconds=seconds)
        for o in outputs:
            m = rep.by_model.setdefault(o.model, Counter())
            m["outputs"] += 1
            rep.total += 1
            if o.calls is not None:
                rep.decoded += 1
                m["decoded"] += 1
                m[o.decoder] += 1
                rep.by_decoder[o.decoder] += 1
            else:
                err = o.decode_error or ""
                rep.errors_by_kind[err.split(":", 1)[0]] += 1
                rep.reasons[failure_reason(err)] += 1
        return rep

    @property
    def rate(self) -> float:
        return self.decoded / self.total if self.total else 0.0

    def main_decoder(self, model: str) -> str:
        c = Counter({k: v for k, v in self.by_model[model].items() if k not in ("outputs", "decoded")})
        return c.most_common(1)[0][0] if c else "-"

    def to_markdown(self, top: int = 15) -> str:
        lines = [
            "# Decode report",
            "",
            f"{self.decoded:,} of {self.total:,} outputs decoded to calls ({self.rate:.1%}) in {self.seconds:.1f} s.",
            "Not decoded: " + ", ".join(f"{k} {v:,}" for k, v in self.errors_by_kind.most_common()) + ".",
            "",
            "## By format (decoder)",
            "",
            "| decoder | outputs | share of decoded |",
            "|---|---:|---:|",
        ]
        for d, n in self.by_decoder.most_common():
            lines.append(f"| {d} | {n:,} | {n / max(self.decoded, 1):.1%} |")
        lines += ["", "## By model", "", "| model | main format | outputs | decoded | rate |", "|---|---|---:|---:|---:|"]
        for model in sorted(self.by_model):
            c = self.by_model[model]
            lines.append(
                f"| {model} | {self.main_decoder(model)} | {c['outputs']:,} | {c['decoded']:,} | {c['decoded'] / c['outputs']:.1%} |"
            )
        lines += ["", f"## Top {top} failure reasons", "", "| outputs | reason |", "|---:|---|"]
        for reason, n in self.reasons.most_common(top):
            lines.append(f"| {n:,} | {reason.replace('|', '/')} |")
        return "\n".join(lines) + "\n"

    def write(self, out_dir: str | Path) -> list[Path]:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        md = out / "decode_report.md"
        md.write_text(self.to_markdown())
        by_model = out / "decode_by_model.csv"
        with open(by_model, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["model", "main_decoder", "outputs", "decoded", "rate"])
            for model in sorted(self.by_model):
                c = self.by_model[model]
                w.writerow([model, self.main_decoder(model), c["outputs"], c["decoded"], round(c["decoded"] / c["outputs"], 4)])
        by_decoder = out / "decode_by_decoder.csv"
        with open(by_decoder, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["decoder", "outputs"])
            w.writerows(self.by_decoder.most_common())
        failures = out / "decode_failures.csv"
        with open(failures, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["reason", "outputs"])
            w.writerows(self.reasons.most_common())
        return [md, by_model, by_decoder, failures]

"""Split a request into the separate asks it makes, so each gets its own retrieval.

One query vector carries one intent: "book a hotel in Paris. Second, what is
the time difference between New York and LA?" embeds closer to hotels than to
time zones, and the encoder reads only its first 128 word pieces, so a third
ask at the end of a long message is not seen at all. The router retrieves for
the whole request and for each part, then merges the rankings (each part's
best tools rise to the top together; see `ToolRouter.route`).

The split is deterministic and cheap (regular expressions, no model): at
sentence ends, semicolons and line breaks, and at "and" / "also" / "then"
when what follows starts a new ask ("and how much…", "and then find…").
Fragments too short to be an ask on their own are joined to their neighbour.

    >>> split_intents("Find the area of a rectangle with length 7. Also, calculate the area of a circle with radius 5.")
    ['Find the area of a rectangle with length 7.', 'Also, calculate the area of a circle with radius 5.']
"""

from __future__ import annotations

import re

# Sentence ends followed by the start of a new sentence; semicolons; line breaks.
_SENTENCE = re.compile(r"(?<=[.?!])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])|;\s+|\s*\n+\s*")
# "…, and how many …", "… and then find …", "…, and also …": a new ask inside one sentence.
_ASK_WORDS = (
    "how|what|which|where|when|who|whom|whose|why|is|are|can|could|would|will|do|does|did|please|"
    "also|then|find|get|calculate|compute|give|tell|show|list|search|look|fetch|retrieve|book|check|"
    "send|create|convert|estimate|predict|determine|identify|provide|plot|analyze|analyse|"
    "i|i'd|i'm|let|lastly|finally|next|after"
)
_CONJUNCTION = re.compile(rf",?\s+(?:and|&)\s+(?=(?:{_ASK_WORDS})\b)|,\s+(?:then|also)\s+", re.IGNORECASE)
_WORD = re.compile(r"[A-Za-z0-9]+")


def split_intents(text: str, max_parts: int = 6, min_words: int = 4) -> list[str]:
    """The asks in `text`, in order; `[text]` when there is only one.

    Parts with fewer than `min_words` words are merged into the previous part
    (or the next, for a leading one); beyond `max_parts`, the shortest
    adjacent pair is merged until it fits. Whitespace-only input gives `[]`.
    """
    text = text.strip()
    if not text:
        return []
    pieces: list[str] = []
    for sentence in _SENTENCE.split(text):
        pieces += [p.strip() for p in _CONJUNCTION.split(sentence) if p and p.strip()]
    parts: list[str] = []
    for p in pieces:
        if parts and len(_WORD.findall(parts[-1])) < min_words:
            parts[-1] = f"{parts[-1]} {p}"
        elif parts and len(_WORD.findall(p)) < min_words:
            parts[-1] = f"{parts[-1]} {p}"
        else:
            parts.append(p)
    while len(parts) > max(1, max_parts):
        j = min(range(len(parts) - 1), key=lambda i: len(parts[i]) + len(parts[i + 1]))
        parts[j : j + 2] = [f"{parts[j]} {parts[j + 1]}"]
    return parts or [text]


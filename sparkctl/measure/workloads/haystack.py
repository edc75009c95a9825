"""Deterministic filler prose for long prompts (NIAH haystacks, the fresh-prefill prompt): no downloads, no digits.

The text is an endless stream of plain English sentences drawn from fixed word lists with `random.Random(seed)`,
so the same seed always gives the same text and a prefix of a longer haystack is a shorter haystack. It holds no
digits at all, so a numeric needle is the only number in the prompt. Lengths are in characters here; callers
that need a token count measure it with the server's /tokenize (the tokenizer is the model's, not ours).
"""

from __future__ import annotations

import random
from collections.abc import Iterator

SUBJECTS = [
    "The harbor master", "A quiet librarian", "The old ferry captain", "Our neighbor across the valley",
    "The committee", "A traveling clockmaker", "The village baker", "An apprentice cartographer",
    "The lighthouse keeper", "A retired engineer", "The orchard cooperative", "The night watchman",
    "A young botanist", "The river pilot", "The town council", "A visiting astronomer", "The weaver's guild",
    "The stationmaster", "A careful archivist", "The mountain guide", "The school choir", "A patient potter",
]
VERBS = [
    "reviewed", "repainted", "catalogued", "argued about", "walked past", "repaired", "described",
    "measured", "photographed", "wrote a letter about", "forgot about", "rebuilt", "inspected", "sketched",
    "mapped", "admired", "questioned", "restored", "planned around", "listened to", "counted", "moved",
]
OBJECTS = [
    "the stone bridge", "the winter schedule", "a crate of pears", "the northern road", "the brass telescope",
    "the flooded meadow", "a stack of old newspapers", "the chapel bells", "the grain ledger", "the wooden pier",
    "a box of spare gears", "the rooftop garden", "the faded mural", "the salt marsh", "the timetable",
    "the copper kettle", "a map of the coastline", "the broken weathervane", "the market stalls", "the orchard wall",
]
ADVERBIALS = [
    "before the storms arrived", "after the long dry summer", "while the tide was out", "in the early morning fog",
    "without telling anyone", "as the lanterns were lit", "during the spring fair", "under a grey sky",
    "with unusual care", "for the third time that season", "despite the cold wind", "once the snow had melted",
    "near the edge of the forest", "on the way back from the market", "while the bells were ringing",
]
CONNECTORS = [
    "Later,", "Meanwhile,", "Afterwards,", "In the end,", "That evening,", "Some days later,", "Even so,",
    "By then,", "As usual,", "Quite unexpectedly,",
]
CODAS = [
    "and nobody seemed surprised", "which pleased most of the town", "though the records say little more",
    "and the matter was soon forgotten", "so the work had to begin again", "and the visitors took notes",
    "but the weather did not cooperate", "and everyone agreed it was worth it",
]


def sentences(seed: int = 0) -> Iterator[str]:
    """An endless, reproducible stream of sentences (paragraph breaks included as a trailing blank line)."""
    rng = random.Random(seed)
    n = 0
    while True:
        parts = []
        if rng.random() < 0.25:
            parts.append(rng.choice(CONNECTORS))
            subject = rng.choice(SUBJECTS)
            parts.append(subject[0].lower() + subject[1:])
        else:
            parts.append(rng.choice(SUBJECTS))
        parts += [rng.choice(VERBS), rng.choice(OBJECTS), rng.choice(ADVERBIALS)]
        if rng.random() < 0.4:
            parts.append(rng.choice(CODAS))
        sentence = " ".join(parts) + "."
        n += 1
        if n % rng.randint(5, 9) == 0:
            sentence += "\n\n"
        else:
            sentence += " "
        yield sentence


def sentence_list(n_chars: int, seed: int = 0) -> list[str]:
    """Whole sentences of the stream, about n_chars in all (never more); same seed: prefixes of one another."""
    out: list[str] = []
    size = 0
    for s in sentences(seed):
        if size + len(s) > n_chars:
            break
        out.append(s)
        size += len(s)
    return out


def text(n_chars: int, seed: int = 0) -> str:
    """sentence_list joined: plain prose about n_chars long."""
    return "".join(sentence_list(n_chars, seed))

"""The real work behind the demo's tools: tokens, counts, readability, sentiment and keywords.

Plain deterministic Python (no network, no ML model), so the demo runs offline on a fresh machine
and every number it reports can be checked by hand.
"""

from __future__ import annotations

import re
from collections import Counter

from app.demo.lexicon import NEGATORS, SENTIMENT_LEXICON, STOP_WORDS
from app.demo.schemas import (
    KeywordCount,
    Readability,
    ReadingLevel,
    SentimentLabel,
    SentimentScore,
    TextCounts,
)

_WORD = re.compile(r"[^\W_]+(?:['\u2019][^\W_]+)*")
# A sentence ends at . ! or ? (maybe behind a closing quote or bracket) before whitespace, or at
# a blank line. Abbreviations such as "Dr." end a sentence too: the price of staying simple.
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+|(?<=[.!?][\"'\u201d\u2019)\]])\s+|\n\s*\n")
_VOWEL_GROUP = re.compile(r"[aeiouy]+")
_READING_LEVELS: tuple[tuple[float, ReadingLevel], ...] = (
    (90, "very easy"),
    (80, "easy"),
    (70, "fairly easy"),
    (60, "standard"),
    (50, "fairly difficult"),
    (30, "difficult"),
)


def words(text: str) -> list[str]:
    """The text's words as written: runs of letters or digits, inner apostrophes kept."""
    return _WORD.findall(text)


def normalise(word: str) -> str:
    """A word lower-cased, with a typographic apostrophe made plain (for look-ups)."""
    return word.lower().replace("\u2019", "'")


def sentences(text: str) -> list[str]:
    """The text's sentences, stripped; pieces without a word are dropped."""
    pieces = (piece.strip() for piece in _SENTENCE_BREAK.split(text))
    return [piece for piece in pieces if _WORD.search(piece)]


def count_syllables(word: str) -> int:
    """Syllables in one word: its vowel groups (y counts), less a silent final e, at least 1.

    A heuristic, right for most English words ("beautiful" 3, "gate" 1, "table" 2) and wrong for
    some ("quiet" 1).
    """
    letters = normalise(word).replace("'", "")
    count = len(_VOWEL_GROUP.findall(letters))
    if count > 1 and letters.endswith("e") and not letters.endswith("le"):
        count -= 1
    return max(count, 1)


def count_text(text: str) -> TextCounts:
    """Words, sentences, non-whitespace characters and distinct words of `text`."""
    tokens = words(text)
    sentence_count = max(len(sentences(text)), 1) if tokens else 0
    return TextCounts(
        words=len(tokens),
        sentences=sentence_count,
        characters=sum(1 for char in text if not char.isspace()),
        unique_words=len({normalise(token) for token in tokens}),
        average_sentence_length=round(len(tokens) / sentence_count, 2) if tokens else 0.0,
    )


def reading_level(reading_ease: float) -> ReadingLevel:
    """Flesch's band for a reading-ease score."""
    for floor, level in _READING_LEVELS:
        if reading_ease >= floor:
            return level
    return "very difficult"


def readability(text: str) -> Readability:
    """Flesch reading ease and Flesch-Kincaid grade of `text` (which must hold a word)."""
    tokens = words(text)
    if not tokens:
        raise ValueError("readability needs a text with at least one word")
    sentence_count = max(len(sentences(text)), 1)
    syllables = sum(count_syllables(token) for token in tokens)
    words_per_sentence = len(tokens) / sentence_count
    syllables_per_word = syllables / len(tokens)
    ease = 206.835 - 1.015 * words_per_sentence - 84.6 * syllables_per_word
    grade = 0.39 * words_per_sentence + 11.8 * syllables_per_word - 15.59
    return Readability(
        syllables=syllables,
        flesch_reading_ease=round(ease, 1),
        flesch_kincaid_grade=round(grade, 1),
        reading_level=reading_level(ease),
    )


def _is_negator(token: str) -> bool:
    return token in NEGATORS or token.endswith("n't")


def score_sentiment(text: str) -> SentimentScore:
    """The lexicon's verdict: each known word adds its weight (-3..3), flipped when one of the
    two words before it in its sentence is a negator ("not ugly" counts as positive).

    The score is the sum over 3 per matched word, so it lies in [-1, 1]; 0 when nothing matched.
    """
    total = 0
    matched = 0
    positive: list[str] = []
    negative: list[str] = []
    for sentence in sentences(text):
        tokens = [normalise(token) for token in words(sentence)]
        for index, token in enumerate(tokens):
            weight = SENTIMENT_LEXICON.get(token)
            if weight is None:
                continue
            start = index
            for back in range(index - 1, max(index - 3, -1), -1):
                if _is_negator(tokens[back]):
                    weight, start = -weight, back
                    break
            term = " ".join(tokens[start : index + 1])
            (positive if weight > 0 else negative).append(term)
            total += weight
            matched += 1
    score = round(total / (3 * matched), 3) if matched else 0.0
    label: SentimentLabel = "neutral"
    if score > 0.05:
        label = "positive"
    elif score < -0.05:
        label = "negative"
    return SentimentScore(label=label, score=score, positive=positive, negative=negative)


def extract_keywords(text: str, top_n: int = 5) -> list[KeywordCount]:
    """The `top_n` most frequent content words: lower-cased, without stop words, numbers or words
    under 3 letters; ties in order of first appearance."""
    counts: Counter[str] = Counter(
        token
        for token in map(normalise, words(text))
        if len(token) >= 3 and token not in STOP_WORDS and not token.isdigit()
    )
    # Counter keeps first-seen order and sorted() is stable, so ties stay in text order.
    ranked = sorted(counts.items(), key=lambda item: -item[1])[:top_n]
    return [KeywordCount(word=word, count=count) for word, count in ranked]


def key_sentences(text: str, keywords: list[str], limit: int = 1) -> list[str]:
    """The `limit` sentences holding the most keyword occurrences (earlier wins a tie), returned
    in the text's order."""
    wanted = {normalise(keyword) for keyword in keywords}
    scored = [
        (sum(1 for token in words(sentence) if normalise(token) in wanted), index, sentence)
        for index, sentence in enumerate(sentences(text))
    ]
    best = sorted(scored, key=lambda item: (-item[0], item[1]))[:limit]
    return [sentence for _, _, sentence in sorted(best, key=lambda item: item[1])]

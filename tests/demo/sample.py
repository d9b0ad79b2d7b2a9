"""A small sample text and what the demo must find in it, worked out by hand (not by the code)."""

from __future__ import annotations

from app.demo.schemas import (
    KeySentences,
    KeywordCount,
    Keywords,
    Readability,
    SentimentScore,
    TextCounts,
    TextStats,
    Topics,
)

S1 = "The garden is beautiful in spring."
S2 = "The roses are not ugly at all!"
S3 = "Sadly, the old gate is broken."
S4 = "We love the garden and the roses."
SAMPLE = f"{S1} {S2} {S3} {S4}"

# Words per sentence: 6, 7, 6, 7 = 26. Non-whitespace characters per sentence (punctuation kept):
# The3 garden6 is2 beautiful9 in2 spring.7 = 29; The3 roses5 are3 not3 ugly4 at2 all!4 = 24;
# Sadly,6 the3 old3 gate4 is2 broken.7 = 25; We2 love4 the3 garden6 and3 the3 roses.6 = 27;
# 29 + 24 + 25 + 27 = 105. Distinct words: the garden is beautiful in spring roses are not ugly
# at all sadly old gate broken we love and = 19.
COUNTS = TextCounts(
    words=26, sentences=4, characters=105, unique_words=19, average_sentence_length=6.5
)

# Syllables (vowel groups, less a silent final e): the1 garden2 is1 beautiful3 in1 spring1 = 9;
# the1 roses2 are1 not1 ugly2 at1 all1 = 9; sadly2 the1 old1 gate1 is1 broken2 = 8;
# we1 love1 the1 garden2 and1 the1 roses2 = 9; total 35.
# Ease  = 206.835 - 1.015 * 26/4 - 84.6 * 35/26 = 206.835 - 6.5975 - 113.8846 = 86.35 -> 86.4 (easy)
# Grade = 0.39 * 26/4 + 11.8 * 35/26 - 15.59 = 2.535 + 15.8846 - 15.59 = 2.83 -> 2.8
READABILITY = Readability(
    syllables=35, flesch_reading_ease=86.4, flesch_kincaid_grade=2.8, reading_level="easy"
)

STATS = TextStats(**COUNTS.model_dump(), **READABILITY.model_dump())

# beautiful +3; "not ugly" flips ugly (-2) to +2; sadly -2; broken -2; love +3.
# Sum 4 over 5 matches: 4 / (3 * 5) = 0.2667 -> 0.267, above 0.05: positive.
SENTIMENT = SentimentScore(
    label="positive",
    score=0.267,
    positive=["beautiful", "not ugly", "love"],
    negative=["sadly", "broken"],
)

# Content words (stop words and words under 3 letters out): garden 2, beautiful 1, spring 1,
# roses 2, ugly 1, sadly 1, old 1, gate 1, broken 1, love 1. Most frequent first, ties in order
# of first appearance.
KEYWORDS = Keywords(
    keywords=[
        KeywordCount(word="garden", count=2),
        KeywordCount(word="roses", count=2),
        KeywordCount(word="beautiful", count=1),
        KeywordCount(word="spring", count=1),
        KeywordCount(word="ugly", count=1),
    ]
)

# Keyword occurrences per sentence: S1 garden beautiful spring = 3; S2 roses ugly = 2; S3 0;
# S4 garden roses = 2. The best one is S1.
KEY_SENTENCES = KeySentences(sentences=[S1])

TOPICS = Topics(topics=["garden", "roses", "beautiful"], summary=S1)

REPORT = (
    "Here is what my specialists found.\n"
    "Length: 26 words in 4 sentences, 6.5 words per sentence.\n"
    "Readability: Flesch reading ease 86.4, easy (grade 2.8).\n"
    "Sentiment: positive (score 0.267); positive terms: beautiful, not ugly, love; "
    "negative terms: sadly, broken.\n"
    "Topics: garden, roses, beautiful.\n"
    f"Summary: {S1}"
)
"""The coordinator's report on `SAMPLE`."""

"""The word lists the demo's analysis uses, built in so it needs no download.

The sentiment weights follow the AFINN convention (-3 very negative ... +3 very positive) for a
few hundred common English words; small on purpose, and easy to read or extend.
"""

from __future__ import annotations


def _word_set(words: str) -> frozenset[str]:
    return frozenset(words.split())


def _weights(weight: int, words: str) -> dict[str, int]:
    return dict.fromkeys(words.split(), weight)


STOP_WORDS: frozenset[str] = _word_set(
    """
    a about above after again against all also am an and any are aren't as at be because been
    before being below between both but by can can't cannot could couldn't did didn't do does
    doesn't doing don't down during each even ever every few for from further get gets got had
    hadn't has hasn't have haven't having he he'd he'll he's her here here's hers herself him
    himself his how how's however i i'd i'll i'm i've if in into is isn't it it's its itself
    just let's like made make many may me might more most much must mustn't my myself no nor
    not now of off often on once one only or other ought our ours ourselves out over own per
    quite rather really same say said says shall shan't she she'd she'll she's should shouldn't
    since so some still such than that that's the their theirs them themselves then there
    there's these they they'd they'll they're they've this those though through thus to too
    under until up upon us very was wasn't we we'd we'll we're we've were weren't what what's
    when when's where where's whether which while who who's whom whose why why's will with
    within without won't would wouldn't yet you you'd you'll you're you've your yours yourself
    yourselves
    """
)
"""Common English function words, left out of keywords."""

NEGATORS: frozenset[str] = _word_set(
    "not no never nothing nobody none neither nor without hardly cannot"
)
"""Words that flip the sentiment of a word right after them (any "...n't" does too)."""


SENTIMENT_LEXICON: dict[str, int] = {
    **_weights(
        3,
        """
        amazing awesome beautiful brilliant delighted delightful excellent exceptional fantastic
        glorious gorgeous love loved loves magnificent marvelous marvellous outstanding perfect
        splendid superb thrilled wonderful
        """,
    ),
    **_weights(
        2,
        """
        admire attractive best calm charming cheerful clean comfortable confident easy elegant
        enjoy enjoyed enjoys exciting fresh fun glad good great happy helpful impressive joy
        kind lovely nice peaceful pleasant pleased proud recommend reliable safe smart success
        successful thank thanks useful welcome win wins
        """,
    ),
    **_weights(
        1,
        """
        agree better clear cool fair fine hope improve improved interesting like liked ok okay
        positive ready solid stable support worth
        """,
    ),
    **_weights(
        -1,
        """
        boring confusing delay delayed doubt difficult expensive hard late lost miss missed
        negative odd problem slow tired unclear unfortunately weak worry
        """,
    ),
    **_weights(
        -2,
        """
        angry annoyed annoying bad broke broken crash crashed dirty disappointed disappointing
        fail failed fails failure fear hate poor rude sad sadly ugly unhappy upset wrong
        """,
    ),
    **_weights(
        -3,
        """
        abysmal appalling awful catastrophic disaster disgusting dreadful furious hated hates
        hideous horrible miserable pathetic terrible useless worst
        """,
    ),
}
"""Word -> weight, -3 (very negative) to +3 (very positive)."""

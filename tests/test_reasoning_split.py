"""The reasoning splitter against the plain reading of the tags, over every way of cutting the text."""
from llamay.chat.reasoning import ReasoningSplitter

TEXT = "<think>step one, then <b>two</b></think>The answer is 4.<thin"


def _split_all(pieces):
    s = ReasoningSplitter("{{ '<think>' }}")
    content, reasoning = "", ""
    for p in pieces:
        c, r = s.feed(p)
        content, reasoning = content + c, reasoning + r
    c, r = s.flush()
    return content + c, reasoning + r


def test_every_two_cut_split_matches_the_whole():
    want = ("The answer is 4.<thin", "step one, then <b>two</b>")
    assert _split_all([TEXT]) == want
    for i in range(len(TEXT)):
        for j in range(i, len(TEXT)):
            assert _split_all([TEXT[:i], TEXT[i:j], TEXT[j:]]) == want, (i, j)


def test_disabled_without_the_tag_in_the_template():
    s = ReasoningSplitter("{{ messages }}")
    assert s.feed("<think>x</think>y") == ("<think>x</think>y", "")

from llamay.engine.stops import StopMatcher


def feed_all(stops, pieces):
    m = StopMatcher(stops)
    out = "".join(m.feed(p) for p in pieces) + m.flush()
    return out, m.stopped


def test_stop_string_split_across_pieces_is_not_emitted():
    assert feed_all(["</s>"], ["Hello <", "/", "s> more"]) == ("Hello ", True)


def test_partial_prefix_that_does_not_complete_is_released():
    assert feed_all(["STOP"], ["a ST", "ART b"]) == ("a START b", False)


def test_earliest_of_several_stops_wins():
    assert feed_all(["cd", "b"], ["abcd"]) == ("a", True)


def test_held_text_flushed_at_end():
    assert feed_all(["xyz"], ["abc x"]) == ("abc x", False)


def test_no_stops_passes_everything_through():
    assert feed_all(None, ["a", "b"]) == ("ab", False)

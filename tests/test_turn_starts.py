"""Where a hybrid's prompt is checkpointed besides its chunks' ends: the starts of its last messages, found
by the chat templates' turn markers (engine/checkpoints.py turn_starts)."""
from llamay.engine.checkpoints import turn_starts

# ChatML: <|im_start|>=1 <|im_end|>=2; Llama 3: <|eot_id|>=3 <|start_header_id|>=4 <|end_header_id|>=5
CONTROL = {1, 2, 3, 4, 5}.__contains__
NL, ROLE, TEXT = 10, 11, 12


def chatml(n_messages: int) -> list[int]:
    out = []
    for _ in range(n_messages):
        out += [1, ROLE, NL] + [TEXT] * 6 + [2, NL]
    return out + [1, ROLE, NL]  # the generation prompt


def test_chatml_messages_start_at_im_start():
    tokens = chatml(3)
    assert turn_starts(tokens, CONTROL, 8) == [11, 22]  # not 0 (the first message), nor the answer's start
    assert [tokens[k] for k in turn_starts(tokens, CONTROL, 8)] == [1, 1]


def test_only_the_last_ones_are_kept():
    assert turn_starts(chatml(6), CONTROL, 2) == [44, 55]
    assert turn_starts(chatml(6), CONTROL, 0) == []


def test_llama3_messages_start_after_the_role():
    head = [3, 4, ROLE, 5, NL, NL]  # <|eot_id|><|start_header_id|>user<|end_header_id|>\n\n
    tokens = [TEXT] * 5 + head + [TEXT] * 8 + head + [TEXT] * 8
    assert turn_starts(tokens, CONTROL, 8) == [8, 22]  # each <|end_header_id|>


def test_text_without_markers_has_none():
    assert turn_starts([TEXT] * 50, CONTROL, 3) == []

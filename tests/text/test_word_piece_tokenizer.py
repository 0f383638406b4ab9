import numpy as np
import pytest

from keras_attn.pretrained.minilm import minilm_directory
from keras_attn.text import WordPieceTokenizer

VOCABULARY = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "un", "##aff", "##able", "cafe", ",", "!", "a"]


@pytest.fixture(scope="module")
def minilm_tokenizer():
    return WordPieceTokenizer(minilm_directory() / "vocab.txt", sequence_length=256)


def test_greedy_longest_match_and_unknown_words():
    tokenizer = WordPieceTokenizer(VOCABULARY)
    assert tokenizer.tokenize("Unaffable, CAFÉ!") == ["un", "##aff", "##able", ",", "cafe", "!"]
    assert tokenizer.tokenize("unaffx") == ["[UNK]"]
    assert tokenizer.tokenize("a" * 101) == ["[UNK]"]


def test_cased_mode_keeps_case_and_accents():
    tokenizer = WordPieceTokenizer([*VOCABULARY, "Café"], lowercase=False)
    assert tokenizer.tokenize("Café un") == ["Café", "un"]


def test_control_characters_whitespace_and_cjk():
    tokenizer = WordPieceTokenizer([*VOCABULARY, "中", "文"])
    assert tokenizer.tokenize("a\x00\u200b\tun\u3000中文") == ["a", "un", "中", "文"]


def test_batch_encoding_pads_and_masks():
    tokenizer = WordPieceTokenizer(VOCABULARY)
    batch = tokenizer(["unaffable", "a"])
    np.testing.assert_array_equal(batch["token_ids"], [[2, 4, 5, 6, 3], [2, 10, 3, 0, 0]])
    np.testing.assert_array_equal(batch["padding_mask"], [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    np.testing.assert_array_equal(batch["segment_ids"], np.zeros((2, 5)))
    assert tokenizer("a", pad_to=6)["token_ids"].shape == (1, 6)


def test_truncation_keeps_special_tokens():
    tokenizer = WordPieceTokenizer(VOCABULARY, sequence_length=4)
    assert tokenizer.encode("a a a a a") == [2, 10, 10, 3]


def test_decode_merges_pieces():
    tokenizer = WordPieceTokenizer(VOCABULARY)
    assert tokenizer.decode([2, 4, 5, 6, 3, 0]) == "[CLS] unaffable [SEP]"


def test_minilm_vocabulary(minilm_tokenizer):
    # Ids of the uncased BERT vocabulary.
    assert minilm_tokenizer.encode("A man is eating food.") == [
        101,
        1037,
        2158,
        2003,
        5983,
        2833,
        1012,
        102,
    ]
    assert minilm_tokenizer.tokenize("tokenization") == ["token", "##ization"]
    assert minilm_tokenizer.vocabulary_size == 30522


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"vocabulary": ["a", "b"]}, "Received: vocabulary without"),
        ({"vocabulary": VOCABULARY, "sequence_length": 1}, "Received: sequence_length=1"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        WordPieceTokenizer(**kwargs)


def test_pad_to_shorter_than_text():
    with pytest.raises(ValueError, match="Received: pad_to=2"):
        WordPieceTokenizer(VOCABULARY)(["unaffable"], pad_to=2)

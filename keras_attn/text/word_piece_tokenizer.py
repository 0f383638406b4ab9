"""BERT's WordPiece tokenizer, in pure Python, from a `vocab.txt` file.

Used to feed the pretrained all-MiniLM-L6-v2 encoder (Michel et al., 2019,
prune the heads of such BERT models: https://arxiv.org/abs/1905.10650).
"""

import pathlib
import unicodedata
from collections.abc import Iterable

import numpy as np

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]")


class WordPieceTokenizer:
    """Uncased BERT tokenizer: basic pre-tokenization, then WordPiece.

    Follows BERT's `BasicTokenizer` and `WordpieceTokenizer`: control
    characters are removed, whitespace is normalised, CJK characters become
    words of their own, text is lowercased and its accents stripped (when
    `lowercase=True`, as for uncased checkpoints), punctuation is split off,
    and each word is cut greedily into the longest vocabulary pieces, with
    continuation pieces prefixed by `##`. A word that cannot be cut, or is
    longer than `max_chars_per_word`, becomes `[UNK]`. Encoding adds `[CLS]`
    and `[SEP]`, truncates to `sequence_length` and pads with `[PAD]`.

    Args:
        vocabulary: path of a `vocab.txt` (one token per line, the line
            number is the id) or a list of tokens.
        lowercase: bool, lowercase and strip accents before splitting.
        sequence_length: int, the longest encoded sequence, special tokens
            included (256 for all-MiniLM-L6-v2). Longer texts are truncated.
        max_chars_per_word: int, longer words become `[UNK]`.

    Example:

    >>> vocabulary = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "un", "##aff", "##able"]
    >>> tokenizer = WordPieceTokenizer(vocabulary)
    >>> tokenizer.tokenize("Unaffable!")
    ['un', '##aff', '##able', '[UNK]']
    >>> tokenizer(["unaffable"])["token_ids"].tolist()
    [[2, 4, 5, 6, 3]]
    """

    def __init__(
        self,
        vocabulary: str | pathlib.Path | Iterable[str],
        lowercase: bool = True,
        sequence_length: int = 512,
        max_chars_per_word: int = 100,
    ):
        if isinstance(vocabulary, (str, pathlib.Path)):
            vocabulary = pathlib.Path(vocabulary).read_text(encoding="utf-8").splitlines()
        vocabulary = list(vocabulary)
        missing = [token for token in SPECIAL_TOKENS if token not in vocabulary]
        if missing:
            raise ValueError(
                f"`vocabulary` must contain the special tokens {SPECIAL_TOKENS}. "
                f"Received: vocabulary without {missing}"
            )
        if not isinstance(sequence_length, int) or sequence_length < 2:
            raise ValueError(
                "`sequence_length` must be an integer of at least 2. "
                f"Received: sequence_length={sequence_length!r}"
            )
        self.vocabulary = vocabulary
        self.token_to_id = {token: index for index, token in enumerate(vocabulary)}
        self.lowercase = lowercase
        self.sequence_length = sequence_length
        self.max_chars_per_word = max_chars_per_word
        self.pad_id, self.unk_id, self.cls_id, self.sep_id = (
            self.token_to_id[token] for token in SPECIAL_TOKENS
        )

    @property
    def vocabulary_size(self) -> int:
        return len(self.vocabulary)

    def tokenize(self, text: str) -> list[str]:
        """Splits one text into WordPiece tokens (strings), no special tokens."""
        pieces = []
        for word in self._basic_tokenize(text):
            pieces.extend(self._word_pieces(word))
        return pieces

    def encode(self, text: str) -> list[int]:
        """Token ids of one text: `[CLS] pieces [SEP]`, truncated."""
        ids = [self.token_to_id.get(piece, self.unk_id) for piece in self.tokenize(text)]
        return [self.cls_id, *ids[: self.sequence_length - 2], self.sep_id]

    def decode(self, token_ids: Iterable[int] | np.ndarray) -> str:
        """Joins ids back into text, merging `##` pieces; drops padding."""
        words = []
        for token in (self.vocabulary[int(index)] for index in token_ids):
            if token == "[PAD]":
                continue
            if token.startswith("##") and words:
                words[-1] += token[2:]
            else:
                words.append(token)
        return " ".join(words)

    def __call__(
        self, texts: str | Iterable[str], pad_to: int | None = None
    ) -> dict[str, np.ndarray]:
        """Encodes a batch of texts into padded numpy arrays.

        Args:
            texts: a string or a list of strings.
            pad_to: int, pad every sequence to this length. Defaults to the
                longest encoded sequence of the batch.

        Returns:
            dict of `(batch, length)` int32 arrays: `token_ids`,
            `padding_mask` (1 for real tokens, 0 for padding) and
            `segment_ids` (zeros: one segment per text).
        """
        if isinstance(texts, str):
            texts = [texts]
        encoded = [self.encode(text) for text in texts]
        length = pad_to or max(len(ids) for ids in encoded)
        if length < max(len(ids) for ids in encoded):
            raise ValueError(
                f"`pad_to` is shorter than the longest encoded text. Received: pad_to={pad_to}"
            )
        token_ids = np.full((len(encoded), length), self.pad_id, dtype="int32")
        padding_mask = np.zeros((len(encoded), length), dtype="int32")
        for row, ids in enumerate(encoded):
            token_ids[row, : len(ids)] = ids
            padding_mask[row, : len(ids)] = 1
        return {
            "token_ids": token_ids,
            "padding_mask": padding_mask,
            "segment_ids": np.zeros_like(token_ids),
        }

    def _basic_tokenize(self, text):
        text = _space_out_cjk(_clean(text))
        words = []
        for word in text.split():
            if self.lowercase:
                word = _strip_accents(word.lower())
            words.extend(_split_punctuation(word))
        return words

    def _word_pieces(self, word):
        if len(word) > self.max_chars_per_word:
            return ["[UNK]"]
        pieces, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.token_to_id:
                    break
                end -= 1
            if end == start:
                return ["[UNK]"]
            pieces.append(piece)
            start = end
        return pieces


def _clean(text):
    """Drops NUL, U+FFFD and control characters; maps whitespace to spaces."""
    characters = []
    for char in text:
        if char in "\x00\ufffd" or (_is_control(char)):
            continue
        characters.append(" " if _is_whitespace(char) else char)
    return "".join(characters)


def _is_whitespace(char):
    return char in " \t\n\r" or unicodedata.category(char) == "Zs"


def _is_control(char):
    return char not in "\t\n\r" and unicodedata.category(char) in ("Cc", "Cf")


def _is_punctuation(char):
    code = ord(char)
    ascii_symbol = 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126
    return ascii_symbol or unicodedata.category(char).startswith("P")


def _is_cjk(code):
    return (
        0x4E00 <= code <= 0x9FFF
        or 0x3400 <= code <= 0x4DBF
        or 0x20000 <= code <= 0x2A6DF
        or 0x2A700 <= code <= 0x2B73F
        or 0x2B740 <= code <= 0x2B81F
        or 0x2B820 <= code <= 0x2CEAF
        or 0xF900 <= code <= 0xFAFF
        or 0x2F800 <= code <= 0x2FA1F
    )


def _space_out_cjk(text):
    return "".join(f" {char} " if _is_cjk(ord(char)) else char for char in text)


def _strip_accents(word):
    decomposed = unicodedata.normalize("NFD", word)
    return "".join(char for char in decomposed if unicodedata.category(char) != "Mn")


def _split_punctuation(word):
    words, current = [], ""
    for char in word:
        if _is_punctuation(char):
            if current:
                words.append(current)
            words.append(char)
            current = ""
        else:
            current += char
    if current:
        words.append(current)
    return words

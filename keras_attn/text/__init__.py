"""Text preprocessing for the pretrained language models of keras_attn."""

from keras_attn.text.word_piece_tokenizer import WordPieceTokenizer

__all__ = ["WordPieceTokenizer"]

"""Masks for special tokens, non-alphanumeric tokens and NLTK English stopwords (longviz_core.views.masking)."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from tokenizers import ByteLevelBPETokenizer, decoders

from longviz_core import tokens as tk
from longviz_core.views import masking

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The classic 179-word NLTK list (nltk_data before 2025) must be contained in the shipped one.
CLASSIC_179 = """
i me my myself we our ours ourselves you you're you've you'll you'd your yours yourself yourselves he him his himself
she she's her hers herself it it's its itself they them their theirs themselves what which who whom this that
that'll these those am is are was were be been being have has had having do does did doing a an the and but if or
because as until while of at by for with about against between into through during before after above below to from
up down in out on off over under again further then once here there when where why how all any both each few more
most other some such no nor not only own same so than too very s t can will just don don't should should've now d ll
m o re ve y ain aren aren't couldn couldn't didn didn't doesn doesn't hadn hadn't hasn hasn't haven haven't isn isn't
ma mightn mightn't mustn mustn't needn needn't shan shan't shouldn shouldn't wasn wasn't weren weren't won won't
wouldn wouldn't
""".split()
PRONOUN_CONTRACTIONS_2025 = """
he'd he'll he's i'd i'll i'm i've it'd it'll she'd she'll they'd they'll they're they've we'd we'll we're we've
""".split()


def test_shipped_file_is_nltk_english_list():
    words = masking.STOPWORD_FILE.read_text(encoding="utf-8").split("\n")
    assert words[-1] == ""  # one word per line, trailing newline
    words = words[:-1]
    assert len(words) == len(set(words)) == 198
    assert set(words) == set(CLASSIC_179) | set(PRONOUN_CONTRACTIONS_2025)
    assert masking.STOPWORD_FILE.parent.joinpath("README").is_file()
    assert masking.english_stopwords() == frozenset(words)


def test_stopwords_load_offline_without_nltk_in_a_clean_interpreter():
    # Fresh interpreter: sockets fail loudly and nltk cannot be imported at all.
    code = textwrap.dedent(
        """
        import socket, sys
        def no_network(*a, **k):
            raise AssertionError("network used")
        socket.socket = no_network
        sys.modules["nltk"] = None  # import nltk raises ImportError
        from longviz_core.views import masking
        words = masking.english_stopwords()
        print(len(words), "readme" in words, "the" in words, "i'm" in words)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["198", "False", "True", "True"]


def test_normalise_strips_markers_and_lowercases():
    assert tk.normalise_tokens(["ĠThe", "Ċ", "ĊĊ", "Ġ", "Ġ2048", "Ã©", "âĢ", "<s>"]) == [
        "the", "", "", "", "2048", "é", "", "<s>",
    ]
    assert tk.normalise_tokens(["▁The", "▁", "s"]) == ["the", "", "s"]
    wordpiece = ["[CLS]", "The", "##ing", "##", "Don’t"]
    assert tk.normalise_tokens(wordpiece) == ["[cls]", "the", "ing", "##", "don't"]


@pytest.fixture(scope="module")
def byte_level_tokens():
    """Tokens of a real (tiny, trained here) byte-level BPE: spaces, newlines, split words, curly quotes cut
    into byte fragments, an accented letter."""
    text = "The humans don't like “quoted” text — it’s café time.\nThemselves and ourselves are words."
    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator([text] * 50, vocab_size=300, min_frequency=1, show_progress=False)
    return tok.encode(text).tokens


def test_byte_level_decoding_matches_the_tokenizers_decoder(byte_level_tokens):
    decoder = decoders.ByteLevel()
    # the decoder shows a lone byte fragment as U+FFFD; normalisation drops it (no text of its own)
    expected = [decoder.decode([t]).replace("\ufffd", "").strip().lower().replace("’", "'")
                for t in byte_level_tokens]
    assert tk.detect_scheme(byte_level_tokens) == "byte_level"
    assert tk.normalise_tokens(byte_level_tokens) == expected
    assert any(t.startswith("âĢ") for t in byte_level_tokens)  # the fixture does contain byte fragments


def test_byte_table_inverts_gpt2_bytes_to_unicode():
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    table = bytes_to_unicode()
    assert len(tk.byte_decoder()) == len(table) == 256
    for byte, char in table.items():
        assert tk.byte_decoder()[char] == byte


def test_nonalnum_mask():
    tokens = ["<s>", "ĠThe", ".", "Ġ(", "Ġ", "Ċ", "ĊĊ", "âĢ", "ľ", "Ġtraining", "Ġ2048", "'s", "Ã©",
              "</s>"]
    expected = [False, False, True, True, True, True, True, True, True, False, False, False, False, False]
    assert masking.nonalnum_mask(tokens).tolist() == expected
    # The notebook's str.isalnum on raw tokens counts 'Ġ' as a letter: whitespace and byte garbage survive it.
    assert "Ġ".isalnum() and "âĢ".isalnum() and not "'s".isalnum()


def test_nonalnum_other_schemes():
    assert masking.nonalnum_mask(["▁", "▁,", "▁U.S.", "s"]).tolist() == [True, True, False, False]
    # a '##' piece belongs to the word before it (BERT never puts one after punctuation, its own word)
    assert masking.nonalnum_mask(["[CLS]", "the", ",", "cat", "##s", "'"]).tolist() == [False, False, True, False,
                                                                                      False, True]
    assert masking.nonalnum_mask(["[CLS]", ",", "##s"]).tolist() == [False, False, False]  # one word, ',s'


def test_stopword_mask_byte_level_words(byte_level_tokens):
    mask = masking.stopword_mask(byte_level_tokens)
    decoder = decoders.ByteLevel()
    runs, current = [], []
    for token, masked in zip(byte_level_tokens, mask):
        if masked:
            current.append(token)
        elif current:
            runs.append(decoder.decode(current))
            current = []
    # Whole words only: 'humans' keeps its 's' piece, 'café'/'time' keep 'e'; "don't" is "don" + "'t"; the 's'
    # after "it’" is the contraction; "Themselves and ourselves are" is cut into pieces by this tiny BPE.
    assert runs == ["The", " don't", " it", "s", "Themselves and ourselves are"]
    assert any(len(t) < 4 and t.isalpha() and not t.startswith("Ġ") for t in byte_level_tokens)  # pieces present


def test_stopword_mask_handcrafted():
    tokens = ["<s>", "The", "Ġhuman", "s", "Ġthe", "ory", "Ġdoesn", "'t", "Ġ(", "the", "Ġthem", "selves", "Ġa",
              "ĠAbout", "âĢ", "Ļ", "s", "</s>"]
    expected = [False, True, False, False, False, False, True, True, False, True, True, True, True,
                True, False, False, True, False]
    assert masking.stopword_mask(tokens).tolist() == expected


def test_stopword_mask_wordpiece_and_sentencepiece():
    # 'a' + '##bout' is the stopword "about"; 'cat' + '##s' is not; the piece '##s' is not the stopword 's'.
    wp = ["[CLS]", "the", "cat", "##s", "don", "'", "t", "a", "##bout", "an", "##t", "[SEP]"]
    assert masking.stopword_mask(wp).tolist() == [False, True, False, False, True, False, True, True, True, False,
                                                  False, False]
    sp = ["▁The", "▁cat", "s", "▁is", "▁a", "bout", "▁don't", "▁", "▁a", "nt"]
    assert masking.stopword_mask(sp).tolist() == [True, False, False, True, True, True, True, False, False, False]


def test_special_mask():
    tokens = ["<s>", "Ġa", "<pad>", "[CLS]", "<mask>", "</s>", "Ġ<s>"]
    assert masking.special_mask(tokens).tolist() == [True, False, True, True, True, True, False]
    assert masking.special_mask(tokens, special_tokens=["Ġa"]).tolist() == [False, True, False, False, False,
                                                                             False, False]
    assert masking.special_mask(tokens, special_tokens=None).tolist() == masking.special_mask(tokens).tolist()
    with pytest.raises(ValueError, match="not the string"):
        masking.special_mask(tokens, special_tokens="<s>")


def test_build_mask_is_the_union_of_the_chosen_masks():
    tokens = ["<s>", "ĠThe", "Ġcat", ".", "Ċ", "Ġsat", "</s>"]
    assert masking.build_mask(tokens).tolist() == [True, True, False, True, True, False, True]
    assert masking.build_mask(tokens, special=False).tolist() == [False, True, False, True, True, False, False]
    assert masking.build_mask(tokens, nonalnum=False).tolist() == [True, True, False, False, False, False, True]
    assert masking.build_mask(tokens, stopwords=False).tolist() == [True, False, False, True, True, False, True]
    assert not masking.build_mask(tokens, special=False, nonalnum=False, stopwords=False).any()
    assert masking.build_mask(tokens, special_tokens=["Ġcat"]).tolist() == [False, True, True, True, True, False,
                                                                             False]
    out = masking.build_mask(np.array(tokens))
    assert out.dtype == bool and out.shape == (7,)


def test_empty_and_invalid_inputs():
    for fn in (masking.build_mask, masking.stopword_mask, masking.nonalnum_mask, masking.special_mask):
        assert fn([]).shape == (0,) and fn([]).dtype == bool
        with pytest.raises(ValueError, match="list of strings"):
            fn("ĠThe")
        with pytest.raises(ValueError, match="token 1 is int"):
            fn(["a", 3])
        with pytest.raises(ValueError, match="list of strings"):
            fn(None)
    with pytest.raises(ValueError, match="scheme"):
        masking.build_mask(["a"], scheme="bpe")

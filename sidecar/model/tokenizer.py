"""Text -> token ids, one tokenizer for counting and for inference: a ``tokenizer.json`` in
HuggingFace ``tokenizers``, or the converted e5's ``tokenizer.model`` in ``sentencepiece``."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from sidecar.contracts.errors import EmbedderError
from sidecar.model.e5tokenizer import normalizer_spec


class Tokenizer(Protocol):
    """Text -> token ids, the same for counting and for inference."""

    specials: int  # special tokens around one text

    def ids_batch(self, texts: Sequence[str], add_special: bool, limit: int | None = None) -> list[list[int]]:
        """Ids per text; ``limit`` cuts the content (before the specials are added)."""
        ...


class HfTokenizer:
    """A ``tokenizer.json`` in HuggingFace ``tokenizers`` (MiniLM and user models)."""

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer as HfTok

        try:
            tok = HfTok.from_file(str(path))
        except Exception as exc:  # the tokenizers library raises plain Exception
            raise EmbedderError(f"cannot load tokenizer {path}: {exc}") from exc
        # MiniLM's tokenizer.json hard-codes truncation and padding to 128: neither applies here.
        tok.no_truncation()
        tok.no_padding()
        self._tok = tok
        self.specials = int(tok.num_special_tokens_to_add(False))

    def ids_batch(self, texts: Sequence[str], add_special: bool, limit: int | None = None) -> list[list[int]]:
        out = []
        for enc in self._tok.encode_batch(list(texts), add_special_tokens=False):
            if limit is not None and len(enc.ids) > limit:
                enc.truncate(limit)
            out.append(self._tok.post_process(enc).ids if add_special else enc.ids)
        return out


_SPACE_RUN = re.compile(" {2,}")


class E5SentencePiece:
    """The converted e5's ``tokenizer.model`` (see :mod:`sidecar.model.e5prep`) in ``sentencepiece``,
    with the C engine's pipeline around it: per-character map, space runs collapsed to one, one
    space in front unless there is one, one Viterbi lattice, one unknown per unknown character
    (SentencePiece merges a run of them into one), ``<s> … </s>``. A 250k-piece Unigram takes
    about 45 MB resident here, against about 280 MB in ``tokenizers``."""

    specials = 2

    def __init__(self, path: Path) -> None:
        import sentencepiece as spm

        try:
            model = path.read_bytes()
            # The map alone (SentencePiece's own space handling off): applied before the runs
            # are collapsed, as the C engine does. Applying it again inside encode changes
            # nothing (no replacement is mapped further), so the model keeps its normaliser.
            self._norm = spm.SentencePieceNormalizer(
                normalizer_spec=normalizer_spec(model), escape_whitespaces=False
            )
            self._sp = spm.SentencePieceProcessor(model_proto=model)
        except (OSError, ValueError, RuntimeError) as exc:
            raise EmbedderError(f"cannot load tokenizer {path}: {exc}") from exc
        self._bos, self._eos = self._sp.piece_to_id("<s>"), self._sp.piece_to_id("</s>")
        self._unk = self._sp.unk_id()

    def ids_batch(self, texts: Sequence[str], add_special: bool, limit: int | None = None) -> list[list[int]]:
        lines = []
        for text in texts:
            line = _SPACE_RUN.sub(" ", self._norm.normalize(text))
            lines.append(line if line.startswith(" ") else " " + line)
        rows: list[list[int]] = self._sp.encode(lines, num_threads=1)
        out = []
        for line, row in zip(lines, rows, strict=True):
            ids = row if self._unk not in row else self._spread_unknowns(line, row)
            if limit is not None:
                ids = ids[:limit]
            out.append([self._bos, *ids, self._eos] if add_special else ids)
        return out

    def _spread_unknowns(self, line: str, ids: list[int]) -> list[int]:
        """One unknown id per character of each merged unknown piece (rare: not on the fast path)."""
        pieces: list[str] = self._sp.encode(line, out_type=str)
        out = []
        for i, piece in zip(ids, pieces, strict=True):
            out.extend([i] * (len(piece) if i == self._unk else 1))
        return out


def make_tokenizer(path: Path) -> Tokenizer:
    """One tokenizer for counting and for inference, never a second copy just to truncate
    differently (``OnnxEmbedder.encode`` cuts): ``tokenizer.model`` is the converted e5's, any
    other file a ``tokenizers`` JSON."""
    if path.suffix == ".model":
        return E5SentencePiece(path)
    return HfTokenizer(path)

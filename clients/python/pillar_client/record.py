"""Decoding of prepared page records (internal/record, record.proto)."""

import struct
from dataclasses import dataclass, field
from typing import Any, List

from ._gen import record_pb2

try:
    import numpy as _np
except ImportError:  # numpy is optional: embeddings are then lists of floats
    _np = None

__all__ = ["Record", "Chunk", "decode_record", "decode_vector", "CorruptRecord"]

_FLOAT32, _FLOAT16, _INT8 = 1, 2, 3
_ELEM = {_FLOAT32: 4, _FLOAT16: 2, _INT8: 1}
_NAMES = {0: "unspecified", _FLOAT32: "float32", _FLOAT16: "float16", _INT8: "int8"}


class CorruptRecord(ValueError):
    """A value that is not a valid record (record.Unmarshal / record.Check refuse it)."""


@dataclass
class Chunk:
    """One passage of a page and its embedding.

    start, end: byte offsets into the page's clean text, [start, end) (the
    clean text itself is not in the record). embedding: the vector as
    numpy float32 array (a list of floats without numpy), decoded exactly
    as Go's record.DecodeVector does; None when the chunk has no
    embedding. encoding: "float32", "float16" or "int8" as stored ("" for
    none)."""

    chunk_no: int
    text: str
    start: int
    end: int
    embedding: Any = None
    encoding: str = ""


@dataclass
class Record:
    """A prepared page (record.PreparedPage). There is no full clean text
    in a record: the chunks' texts are passages cut from it (they may
    overlap), not the text itself."""

    url: str
    title: str
    content_hash: str
    chunker_version: str
    model_version: str
    updated_at_ms: int
    chunks: List[Chunk] = field(default_factory=list)


def decode_vector(data, dims, encoding, scale):
    """record.DecodeVector: dims elements of data, little-endian."""
    es = _ELEM.get(encoding)
    if es is None:
        raise CorruptRecord("embedding encoding %s is not supported" % _NAMES.get(encoding, "encoding(%d)" % encoding))
    if dims < 0 or len(data) != dims * es:
        raise CorruptRecord("embedding of %d bytes does not hold %d %s elements" % (len(data), dims, _NAMES[encoding]))
    if _np is not None:
        if encoding == _FLOAT32:
            return _np.frombuffer(data, dtype="<f4").astype(_np.float32)
        if encoding == _FLOAT16:
            return _np.frombuffer(data, dtype="<f2").astype(_np.float32)
        return _np.frombuffer(data, dtype=_np.int8).astype(_np.float32) * _np.float32(scale)
    if encoding == _FLOAT32:
        return list(struct.unpack("<%df" % dims, data))
    if encoding == _FLOAT16:
        return list(struct.unpack("<%de" % dims, data))
    # float32(q) * scale in float32: the double product is exact (8 x 24
    # bits), so rounding it once to float32 is Go's float32 product.
    f32 = struct.Struct("<f")
    return [f32.unpack(f32.pack(q * scale))[0] for q in struct.unpack("<%db" % dims, data)]


def decode_record(value):
    """record.Unmarshal: an encoded PreparedPage -> Record. Raises CorruptRecord."""
    p = record_pb2.PreparedPage()
    try:
        p.ParseFromString(value)
    except Exception as e:  # google.protobuf.message.DecodeError
        raise CorruptRecord("%d bytes: %s" % (len(value), e)) from None
    if not p.url:
        raise CorruptRecord("record has no url")
    chunks = []
    for i, c in enumerate(p.chunks):
        if c.dims < 0:
            raise CorruptRecord("%s: chunk %d (#%d): dims %d" % (p.url, c.chunk_no, i, c.dims))
        emb, enc = None, ""
        if c.dims != 0 or len(c.embedding) != 0:
            try:
                emb = decode_vector(c.embedding, c.dims, c.encoding, c.scale)
            except CorruptRecord as e:
                raise CorruptRecord("%s: chunk %d: %s" % (p.url, c.chunk_no, e)) from None
            enc = _NAMES[c.encoding]
        chunks.append(Chunk(chunk_no=c.chunk_no, text=c.text, start=c.start, end=c.end, embedding=emb, encoding=enc))
    return Record(url=p.url, title=p.title, content_hash=p.content_hash, chunker_version=p.chunker_version,
                  model_version=p.model_version, updated_at_ms=p.updated_at_ms, chunks=chunks)

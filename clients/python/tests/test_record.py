import struct
import unittest

from pillar_client import record as rec_mod
from pillar_client import decode_record, decode_vector
from pillar_client._gen import record_pb2

from _harness import bits


def f16_bits_to_f32_bits(h):
    """Go's record.Float16From, on bits."""
    sign = (h & 0x8000) << 16
    exp = (h >> 10) & 0x1F
    mant = h & 0x3FF
    if exp == 0:
        v = mant / (1 << 24)
        return struct.unpack("<I", struct.pack("<f", -v if sign else v))[0]
    if exp == 0x1F:
        return sign | 0x7F800000 | mant << 13
    return sign | (exp + 112) << 23 | mant << 13


class DecodeVectorTest(unittest.TestCase):
    def both(self, fn):
        """Runs fn with numpy (when importable) and with the pure-Python fallback."""
        saved = rec_mod._np
        try:
            fn()
            rec_mod._np = None
            fn()
        finally:
            rec_mod._np = saved

    def test_float16_all_values(self):
        halves = list(range(0, 0x10000))
        data = struct.pack("<%dH" % len(halves), *halves)
        want = [f16_bits_to_f32_bits(h) for h in halves]

        def check():
            got = bits(decode_vector(data, len(halves), 2, 0.0))
            diff = [(h, g, w) for h, g, w in zip(halves, got, want) if g != w
                    and not (((w >> 23) & 0xFF) == 0xFF and w & 0x7FFFFF and rec_mod._np is None)]
            self.assertEqual(diff[:5], [])
        self.both(check)

    def test_float32_and_int8(self):
        vals = [0.0, -0.0, 1.5, -2.25, 3.4e38, 1e-45]
        data = struct.pack("<%df" % len(vals), *vals)
        q = [-127, -1, 0, 1, 127, 64]
        scale = struct.unpack("<f", struct.pack("<f", 0.0123))[0]
        qdata = struct.pack("<%db" % len(q), *q)

        def check():
            self.assertEqual(bits(decode_vector(data, len(vals), 1, 0.0)), bits(vals))
            got = bits(decode_vector(qdata, len(q), 3, scale))
            want = [struct.unpack("<I", struct.pack("<f", x * scale))[0] for x in q]
            self.assertEqual(got, want)
        self.both(check)

    def test_corrupt(self):
        with self.assertRaises(ValueError):
            decode_vector(b"\x00" * 3, 1, 1, 0.0)
        with self.assertRaises(ValueError):
            decode_vector(b"\x00" * 4, 1, 9, 0.0)
        with self.assertRaises(ValueError):
            decode_record(b"\xff\xff\xff")
        with self.assertRaises(ValueError):
            decode_record(record_pb2.PreparedPage(title="no url").SerializeToString())
        bad = record_pb2.PreparedPage(url="u", chunks=[record_pb2.Chunk(dims=4, embedding=b"\x00" * 3, encoding=1)])
        with self.assertRaisesRegex(ValueError, "chunk 0"):
            decode_record(bad.SerializeToString())

    def test_no_embedding(self):
        p = record_pb2.PreparedPage(url="u", chunks=[record_pb2.Chunk(chunk_no=3, text="t")])
        r = decode_record(p.SerializeToString())
        self.assertIsNone(r.chunks[0].embedding)
        self.assertEqual(r.chunks[0].encoding, "")
        self.assertFalse(hasattr(r, "text"))


if __name__ == "__main__":
    unittest.main()

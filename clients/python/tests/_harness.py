"""Shared helpers of the Python tests: the Go harness's environment.

clients/python/client_test.go starts a real router over real cobbled nodes
and runs these tests with PILLAR_TEST_* variables set; without them the
tests that need the cluster skip.
"""

import json
import os
import struct
import time
import unittest
import urllib.request

ENV = os.environ


def need_cluster(cls_or_fn):
    return unittest.skipUnless(ENV.get("PILLAR_TEST_EXPECT"), "needs the Go harness (go test ./clients/python)")(cls_or_fn)


_expect = None


def expectations():
    global _expect
    if _expect is None:
        with open(ENV["PILLAR_TEST_EXPECT"], encoding="utf-8") as f:
            _expect = json.load(f)
    return _expect


def control(path):
    """POSTs to the Go harness's control (node/kill?i=0, router/stop, ...)."""
    req = urllib.request.Request(ENV["PILLAR_TEST_CONTROL"] + "/" + path, data=b"", method="POST")
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.read().decode()


def bits(embedding):
    """float32 bit patterns of an embedding (numpy array or list)."""
    if embedding is None:
        return None
    if hasattr(embedding, "view"):
        import numpy as np
        assert embedding.dtype == np.float32, embedding.dtype
        return embedding.view(np.uint32).tolist()
    return [struct.unpack("<I", struct.pack("<f", x))[0] for x in embedding]


def assert_record(tc, rec, exp):
    tc.assertEqual(rec.url, exp["url"])
    tc.assertEqual(rec.title, exp["title"])
    tc.assertEqual(rec.content_hash, exp["content_hash"])
    tc.assertEqual(rec.chunker_version, exp["chunker_version"])
    tc.assertEqual(rec.model_version, exp["model_version"])
    tc.assertEqual(rec.updated_at_ms, exp["updated_at_ms"])
    tc.assertEqual(len(rec.chunks), len(exp["chunks"]))
    for c, ec in zip(rec.chunks, exp["chunks"]):
        tc.assertEqual((c.chunk_no, c.text, c.start, c.end), (ec["chunk_no"], ec["text"], ec["start"], ec["end"]))
        tc.assertEqual(c.encoding, ec["encoding"])
        tc.assertEqual(bits(c.embedding), ec["embedding_bits"], "chunk %d of %s" % (c.chunk_no, rec.url))


def wait_healthy(client, keys, within=20.0):
    """Retries a batch_get until it succeeds (nodes restarted, router reconnecting)."""
    deadline = time.monotonic() + within
    while True:
        try:
            return client.batch_get(keys)
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)

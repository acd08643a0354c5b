import unittest

from pillar_client import InvalidURL, key_of_url, normalize_url, parse_key

from _harness import expectations, need_cluster


class KeyOfURLTest(unittest.TestCase):
    def test_examples(self):
        self.assertEqual(normalize_url("HTTP://Example.COM:80"), "http://example.com/")
        self.assertEqual(normalize_url("https://a.b:443/x y#frag"), "https://a.b/x%20y")
        self.assertEqual(len(key_of_url("https://example.com/")), 16)
        for bad in ["", "/relative", "example.com/x", "http://", "http://a/%zz", "mailto:a@b", "http://a b/"]:
            with self.assertRaises(InvalidURL, msg=bad):
                key_of_url(bad)

    def test_parse_key(self):
        self.assertEqual(parse_key("00" * 16), bytes(16))
        with self.assertRaises(ValueError):
            parse_key("abc")


@need_cluster
class KeyOfURLMatchesGoTest(unittest.TestCase):
    def test_vectors(self):
        vectors = expectations()["key_vectors"]
        self.assertGreater(len(vectors), 1000)
        mismatches = []
        for v in vectors:
            try:
                n = normalize_url(v["url"])
                got = (True, key_of_url(v["url"]).hex(), n)
            except InvalidURL as e:
                got = (False, None, str(e))
            want = (v["ok"], v.get("key"), v.get("normalized"))
            if got[0] != want[0] or (want[0] and got[1:] != want[1:]):
                mismatches.append("%r: python %r, go %r (%s)" % (v["url"], got, want, v.get("error", "")))
        self.assertEqual(mismatches, [], "%d of %d URLs differ from pillar.KeyOfURL:\n%s"
                         % (len(mismatches), len(vectors), "\n".join(mismatches[:30])))

    def test_url_pages(self):
        for v in expectations()["url_pages"]:
            self.assertTrue(v["ok"])
            self.assertEqual(key_of_url(v["url"]).hex(), v["key"], v["url"])


if __name__ == "__main__":
    unittest.main()

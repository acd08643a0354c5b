package ingest

import (
	"encoding/binary"
	"errors"

	"github.com/pillarkit/pillar/pillar"
)

// The spill encoding of a cleaned page: the file path, then the Doc's
// fields in declaration order; strings as uvarint length + bytes, integers
// as varints. Version and UpdatedAt are not spilled (merge sets them).

func appendDoc(b []byte, path string, d *pillar.Doc) ([]byte, error) {
	for _, s := range []string{path, d.PageKey, d.URL, d.Host, d.ContentHash, d.Title, d.Text, d.Lang} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	for _, n := range []int64{d.FetchedAt, d.TextLen, d.OutLinks, d.HTMLBytes, d.Version} {
		b = binary.AppendVarint(b, n)
	}
	return b, nil
}

var errShortSpill = errors.New("truncated spill record")

func decodeDoc(b []byte) (path string, d pillar.Doc, err error) {
	strs := []*string{&path, &d.PageKey, &d.URL, &d.Host, &d.ContentHash, &d.Title, &d.Text, &d.Lang}
	for _, p := range strs {
		n, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < n {
			return "", d, errShortSpill
		}
		*p = string(b[k : k+int(n)])
		b = b[k+int(n):]
	}
	for _, p := range []*int64{&d.FetchedAt, &d.TextLen, &d.OutLinks, &d.HTMLBytes, &d.Version} {
		v, k := binary.Varint(b)
		if k <= 0 {
			return "", d, errShortSpill
		}
		*p = v
		b = b[k:]
	}
	return path, d, nil
}

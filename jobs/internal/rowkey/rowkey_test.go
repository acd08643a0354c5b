package rowkey

import (
	"bytes"
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

type row struct {
	S string  `yson:"s"`
	I int64   `yson:"i"`
	F float64 `yson:"f"`
	U uint32
	X int `yson:"-"`
}

func TestOrderMatchesValues(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	strs := []string{"", "a", "a\x00", "a\x00b", "ab", "b", "\xff", "\x00"}
	var rows []row
	for i := 0; i < 2000; i++ {
		rows = append(rows, row{
			S: strs[rng.IntN(len(strs))],
			I: []int64{math.MinInt64, -5, -1, 0, 1, 7, math.MaxInt64}[rng.IntN(7)],
			F: []float64{math.Inf(-1), -2.5, math.Copysign(0, -1), 0, 1e-9, 3, math.Inf(1)}[rng.IntN(7)],
			U: uint32(rng.IntN(3)),
		})
	}
	e := New([]string{"s", "i", "f", "U"})
	key := func(r row) []byte {
		b, err := e.Append(nil, &r)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ref := func(a, b row) int {
		return cmp.Or(cmp.Compare(a.S, b.S), cmp.Compare(a.I, b.I), cmp.Compare(a.F, b.F), cmp.Compare(a.U, b.U))
	}
	for i := 0; i+1 < len(rows); i++ {
		a, b := rows[i], rows[i+1]
		if got, want := bytes.Compare(key(a), key(b)), ref(a, b); got != want && !(a.F == 0 && b.F == 0) {
			t.Fatalf("compare(%+v, %+v) = %d, want %d", a, b, got, want)
		}
	}
	// Prefix property: the key of the first column is a prefix of the full key.
	p := New([]string{"s"})
	for _, r := range rows[:50] {
		pk, _ := p.Append(nil, r)
		if !bytes.HasPrefix(key(r), pk) {
			t.Fatalf("prefix key of %+v is not a prefix", r)
		}
	}
	// Maps and structs encode alike; a missing column is null and sorts first.
	m := map[string]any{"s": "ab", "i": int64(-5), "f": 3.0, "U": uint64(2)}
	km, err := e.Append(nil, m)
	if err != nil {
		t.Fatal(err)
	}
	if ks := key(row{S: "ab", I: -5, F: 3, U: 2}); !bytes.Equal(km, ks) {
		t.Fatalf("map key %x != struct key %x", km, ks)
	}
	kn, _ := e.Append(nil, map[string]any{"i": 1})
	if bytes.Compare(kn, key(row{})) >= 0 {
		t.Fatal("null must sort before every string")
	}
	if _, err := e.Append(nil, map[string]any{"s": []int{1}}); err == nil {
		t.Fatal("a list key column must be an error")
	}
	_ = slices.Clone(rows)
}

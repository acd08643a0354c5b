package cli

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

func TestSnakeCase(t *testing.T) {
	for in, want := range map[string]string{"BatchID": "batch_id", "SSTBytes": "sst_bytes", "OldestAge": "oldest_age",
		"Partition": "partition", "QueueEnd": "queue_end", "P99": "p99", "HTTPAddr": "http_addr", "ID": "id", "Seq2Hi": "seq2_hi"} {
		if got := snakeCase(in); got != want {
			t.Errorf("snakeCase(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPrintJSONShape(t *testing.T) {
	type inner struct {
		LeaseExpires time.Time
		Never        time.Time
		Tagged       string `json:"custom_name,omitempty"`
		Skipped      string `json:"-"`
	}
	type res struct {
		BatchID   string
		Elapsed   time.Duration
		Lag       time.Duration `json:"lag"`
		Fraction  time.Duration
		Parts     []inner
		Nothing   []int
		ByName    map[string]int
		RawBytes  []byte
		MaybeNext *inner
	}
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.FixedZone("x", 3600))
	var buf bytes.Buffer
	err := printJSON(&buf, res{BatchID: "b1", Elapsed: 1500 * time.Millisecond, Lag: 2 * time.Second, Fraction: 1500 * time.Microsecond,
		Parts: []inner{{LeaseExpires: at}}, ByName: map[string]int{"KeepMe": 1}})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	want := `{"batch_id":"b1","by_name":{"KeepMe":1},"elapsed_ms":1500,"fraction_ms":1.5,"lag_ms":2000,"maybe_next":null,"nothing":[],"parts":[{"lease_expires":"2026-12-01T08:00:00Z","never":null}],"raw_bytes":[]}`
	if b, _ := json.Marshal(got); string(b) != want {
		t.Errorf("printJSON:\n got %s\nwant %s", b, want)
	}
	checkJSONShape(t, "printJSON", got, "by_name")
}

package embedder

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pillarkit/pillar/jobs/embedder/fakemodel"
)

// rate= spaces the requests: over any stretch t, at most concurrency +
// rate × t start (a token bucket of concurrency tokens), the retries of
// 429s included, and every vector still comes back right.
func TestOpenAIRateLimit(t *testing.T) {
	srv := fakemodel.Start(fakemodel.Options{Dim: 8, Slots: 8, FailEvery: 7})
	defer srv.Close()
	const rate, conc = 40.0, 4
	e, err := New(srv.Spec(fmt.Sprintf(",batch=1,concurrency=%d,rate=%g,backoff=1ms", conc, rate)), Options{})
	if err != nil {
		t.Fatal(err)
	}
	in := texts(50)
	t0 := time.Now()
	got, err := e.Embed(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range in {
		want := make([]float32, 8)
		fakemodel.Vector(s, want)
		for j := range want {
			if got[i][j] != want[j] {
				t.Fatalf("vector %d: got %v, want %v", i, got[i], want)
			}
		}
	}
	st := srv.Starts()
	if s := srv.Stats(); s.Failed == 0 || int64(len(st)) != s.Requests || s.Requests < 50 {
		t.Fatalf("fault not exercised or starts missing: %+v, %d starts", s, len(st))
	}
	// Each window from one start to a later one: starts in it ≤ burst +
	// rate × its length, plus one for the network's jitter.
	for i := range st {
		for j := i; j < len(st); j++ {
			n := j - i + 1
			limit := float64(conc) + rate*st[j].Sub(st[i]).Seconds() + 1
			if float64(n) > limit {
				t.Fatalf("%d requests started within %v: over %d + %g/s", n, st[j].Sub(st[i]), conc, rate)
			}
		}
	}
	if min := time.Duration(float64(len(st)-conc) / rate * float64(time.Second)); time.Since(t0) < min*9/10 {
		t.Errorf("%d requests in %v at %g/s (burst %d): the rate was not applied", len(st), time.Since(t0), rate, conc)
	}
	if _, err := New(srv.Spec(",rate=0"), Options{}); err == nil {
		t.Error("rate=0 accepted")
	}
	if _, err := New(srv.Spec(",rate=fast"), Options{}); err == nil {
		t.Error("rate=fast accepted")
	}
}

func TestWithConcurrency(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"openai:url=http://h/v1,model=m,dim=4", "openai:url=http://h/v1,model=m,dim=4,concurrency=7"},
		{"openai:url=http://h/v1,concurrency=2,model=m,dim=4", "openai:url=http://h/v1,model=m,dim=4,concurrency=7"},
		{"hash:dim=8", "hash:dim=8"},
	} {
		got, err := WithConcurrency(c.in, 7)
		if err != nil || got != c.want {
			t.Errorf("WithConcurrency(%q, 7) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	if _, err := WithConcurrency("hash:dim=8", 0); err == nil {
		t.Error("concurrency 0 accepted")
	}
	e, err := New("openai:url=http://h/v1,model=m,dim=4,batch=16,concurrency=3", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if o := e.(*OpenAI); o.BatchSize() != 16 || o.Concurrency() != 3 {
		t.Errorf("batch %d concurrency %d, want 16 and 3", o.BatchSize(), o.Concurrency())
	}
}

// Two embedders of one spec (a runner's mappers parse one each) share the
// spec's concurrency: together they never have more requests in flight.
func TestConcurrencySharedBySpec(t *testing.T) {
	srv := fakemodel.Start(fakemodel.Options{Dim: 4, Slots: 16, Latency: 20 * time.Millisecond})
	defer srv.Close()
	spec := fmt.Sprintf("openai:url=%s,model=shared,dim=4,batch=2,concurrency=3", srv.URL())
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		e, err := Parse(spec, nil)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			texts := make([]string, 24)
			for j := range texts {
				texts[j] = fmt.Sprint("text ", j)
			}
			if _, err := e.Embed(context.Background(), texts); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if s := srv.Stats(); s.MaxInFlight != 3 || s.Inputs != 48 {
		t.Fatalf("two embedders of concurrency=3: %d requests at once (want 3), %d inputs (want 48)", s.MaxInFlight, s.Inputs)
	}
}

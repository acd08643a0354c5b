package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"sort"

	"github.com/pillarkit/pillar/jobs/chunker"
	"github.com/pillarkit/pillar/pillar"
)

// Preview compares a candidate chunker with the published one (or a chosen
// baseline) on a sample of pages, without writing anything.
type Preview struct {
	Candidate, Baseline string // chunker specs
	CandidateID         string
	BaselineID          string
	Sample              int // pages compared
	// Per chunker: chunks per page and token lengths.
	Cand, Base ChunkStats
	// ChangedPages is how many sampled pages get different boundaries.
	ChangedPages int
	// Example is one page side by side (the first sampled page with text).
	Example *PreviewPage
}

// ChunkStats summarizes one chunker's output on the sample.
type ChunkStats struct {
	Chunks         int
	EmptyPages     int
	ChunksPerPage  float64
	TokensP50      int
	TokensP90      int
	TokensMax      int
	TokensMin      int
	TokenHistogram []int // counts per bucket of HistogramBucket tokens
}

// HistogramBucket is the width of the token-length histogram buckets.
const HistogramBucket = 64

// PreviewPage is one page chunked both ways.
type PreviewPage struct {
	URL        string
	Cand, Base []chunker.Chunk
}

// RunPreview samples n pages of docs (deterministically, by seed) and
// chunks them with candidate and baseline. An empty baseline means the
// published chunk version's spec (an error if nothing is published).
func RunPreview(ctx context.Context, st pillar.Store, candidate, baseline string, n int, seed int64) (*Preview, error) {
	cand, err := chunker.Parse(candidate)
	if err != nil {
		return nil, err
	}
	sn, err := st.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	defer sn.Release()
	if baseline == "" {
		pub, err := pillar.LoadPublished(ctx, sn)
		if errors.Is(err, pillar.ErrNotFound) {
			return nil, fmt.Errorf("preview: nothing is published to compare with: pass --baseline SPEC")
		}
		if err != nil {
			return nil, err
		}
		v, err := pillar.LoadVersion(ctx, sn, pub.ChunkVersion)
		if err != nil {
			return nil, err
		}
		baseline = v.Spec
	}
	base, err := chunker.Parse(baseline)
	if err != nil {
		return nil, err
	}
	ti, err := sn.Table(ctx, pillar.TableDocs)
	if err != nil {
		return nil, fmt.Errorf("preview: %w (run `pillar ingest` first)", err)
	}
	// A sorted sample of n row indexes (Floyd's algorithm: O(n) memory,
	// not a permutation of the corpus), picked in one pass over docs (a
	// layered docs table serves a row range by reading up to it, so reads
	// by range would cost a pass each); n = 0 or n beyond the table takes
	// every page.
	rows := ti.Rows
	var idx []int64
	all := n <= 0 || int64(n) >= rows
	if !all {
		rng := rand.New(rand.NewSource(seed))
		picked := make(map[int64]bool, n) // n sample positions, not pages
		for j := rows - int64(n); j < rows; j++ {
			t := rng.Int63n(j + 1)
			if picked[t] {
				t = j
			}
			picked[t] = true
			idx = append(idx, t)
		}
		slices.Sort(idx)
	}
	p := &Preview{Candidate: cand.Spec(), Baseline: base.Spec(), CandidateID: cand.ID(), BaselineID: base.ID()}
	var candTok, baseTok []int
	rr, err := sn.ReadTable(ctx, pillar.TableDocs, nil)
	if err != nil {
		return nil, err
	}
	defer rr.Close()
	row := int64(-1)
	next := func() (*pillar.Doc, error) {
		for rr.Next() {
			row++
			if !all {
				if len(idx) == 0 {
					return nil, nil
				}
				if idx[0] != row {
					continue
				}
				idx = idx[1:]
			}
			var d pillar.Doc
			return &d, rr.Scan(&d)
		}
		return nil, rr.Err()
	}
	for {
		d, err := next()
		if err != nil {
			return nil, err
		}
		if d == nil {
			break
		}
		p.Sample++
		cc, bc := cand.Chunk(d.Text), base.Chunk(d.Text)
		for _, c := range cc {
			candTok = append(candTok, c.Tokens)
		}
		for _, c := range bc {
			baseTok = append(baseTok, c.Tokens)
		}
		if len(cc) == 0 {
			p.Cand.EmptyPages++
		}
		if len(bc) == 0 {
			p.Base.EmptyPages++
		}
		if !sameBoundaries(cc, bc) {
			p.ChangedPages++
		}
		if p.Example == nil && len(cc) > 1 {
			p.Example = &PreviewPage{URL: d.URL, Cand: cc, Base: bc}
		}
	}
	p.Cand = stats(candTok, p.Sample, p.Cand.EmptyPages)
	p.Base = stats(baseTok, p.Sample, p.Base.EmptyPages)
	return p, nil
}

func sameBoundaries(a, b []chunker.Chunk) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Start != b[i].Start || a[i].End != b[i].End {
			return false
		}
	}
	return true
}

func stats(tok []int, pages, empty int) ChunkStats {
	s := ChunkStats{Chunks: len(tok), EmptyPages: empty}
	if pages > 0 {
		s.ChunksPerPage = float64(len(tok)) / float64(pages)
	}
	if len(tok) == 0 {
		return s
	}
	sorted := append([]int(nil), tok...)
	sort.Ints(sorted)
	s.TokensMin, s.TokensMax = sorted[0], sorted[len(sorted)-1]
	s.TokensP50 = sorted[len(sorted)/2]
	s.TokensP90 = sorted[min(len(sorted)-1, len(sorted)*9/10)]
	s.TokenHistogram = make([]int, s.TokensMax/HistogramBucket+1)
	for _, t := range tok {
		s.TokenHistogram[t/HistogramBucket]++
	}
	return s
}

package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pillarkit/pillar/jobs/pipeline"
	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/subsets"
)

// topKFinal is the final answer for a page that passes a top-K policy's
// predicate ("candidate"): whether the subset's last recompute kept it.
type topKFinal struct {
	Subset string `json:"subset"`
	// Final is "in" or "out" after top-K in the last recompute, or
	// "not computed" when the subset was never recomputed.
	Final      string  `json:"final"`
	Score      float64 `json:"score,omitempty"` // the member's score when in
	Generation int64   `json:"generation,omitempty"`
	AsOf       string  `json:"as_of,omitempty"` // RFC 3339: the recompute's evaluation time
	Size       int64   `json:"size,omitempty"`  // members the recompute kept
}

// finalTopK looks the page up in the subset's current member table
// (subsets.FindMember: a binary search over the sorted members).
func finalTopK(ctx context.Context, sn pillar.Snapshot, subset, key string) (topKFinal, error) {
	out := topKFinal{Subset: subset}
	var meta pipeline.SubsetMeta
	if err := sn.Attr(ctx, pipeline.AttrSubsetPrefix+subset, &meta); err != nil {
		if errors.Is(err, pillar.ErrNotFound) {
			out.Final = "not computed"
			return out, nil
		}
		return out, err
	}
	out.Generation, out.Size, out.AsOf = meta.Generation, meta.Size, meta.AsOf.UTC().Format(time.RFC3339)
	m, err := subsets.FindMember(ctx, sn, meta.Table, key)
	if err != nil {
		return out, fmt.Errorf("subsets explain: %s: %w", subset, err)
	}
	out.Final = "out"
	if m != nil {
		out.Final, out.Score = "in", m.Score
	}
	return out, nil
}

// subsetDiffJSON is `pillar subsets diff --json`.
type subsetDiffJSON struct {
	Subset     string           `json:"subset"`
	Generation int64            `json:"generation"`
	AsOf       string           `json:"as_of"`
	Entered    int              `json:"entered"`
	Left       int              `json:"left"`
	Stayed     int              `json:"stayed"`
	Pages      []subsetDiffPage `json:"pages"` // as listed (--all, --limit)
}

type subsetDiffPage struct {
	Change   string   `json:"change"` // enter, leave or stay
	PageKey  string   `json:"page_key"`
	URL      string   `json:"url,omitempty"` // empty for a page no longer in docs
	OldScore *float64 `json:"old_score,omitempty"`
	NewScore *float64 `json:"new_score,omitempty"`
}

func printSubsetDiffJSON(c *cli.Context, meta *pipeline.SubsetMeta, count map[subsets.ChangeKind]int, list []subsets.Change, urls map[string]string) error {
	out := subsetDiffJSON{Subset: meta.Name, Generation: meta.Generation, AsOf: meta.AsOf.UTC().Format(time.RFC3339Nano),
		Entered: count[subsets.Enter], Left: count[subsets.Leave], Stayed: count[subsets.Stay], Pages: []subsetDiffPage{}}
	for _, ch := range list {
		p := subsetDiffPage{Change: fmt.Sprint(ch.Kind), PageKey: ch.PageKey, URL: urls[ch.PageKey]}
		if ch.Kind != subsets.Enter {
			p.OldScore = &ch.OldScore
		}
		if ch.Kind != subsets.Leave {
			p.NewScore = &ch.NewScore
		}
		out.Pages = append(out.Pages, p)
	}
	return printJSON(c.App.Writer, out)
}

package cli

// Serving publications (issue 18): `pillar publish --serve`, `pillar
// promote`, `pillar rollback --control`, `pillar retire`, and the
// publication tables of `pillar versions --control` and `pillar status`.
// The rules (roles, readiness, retention) live in cobbled/control; this file
// maps flags to its calls and prints the answers.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pillarkit/pillar/bulkexport"
	"github.com/pillarkit/pillar/cobbled/control"
	"github.com/pillarkit/pillar/jobs/pipeline"
	"github.com/pillarkit/pillar/pillar"
)

// publishServeFlags make `pillar publish` register the publication with the
// serving tier (and export it when it needs a snapshot).
var publishServeFlags = []cli.Flag{
	&cli.BoolFlag{Name: "serve", Usage: "also make the pair servable: register its publication with --control as the candidate, export and register its snapshot batches (needs --objstore) when the serving tier does not hold it"},
	&cli.BoolFlag{Name: "live", Usage: "with --serve: make it live as soon as every replica holds it (default: stay a candidate until pillar promote)"},
	&cli.DurationFlag{Name: "wait", Usage: "with --serve: return once every replica holds the publication's newest snapshot (and, with --live, it is live), showing progress; on timeout name the lagging replicas"},
	&cli.StringFlag{Name: "objstore", EnvVars: []string{"PILLAR_OBJSTORE"}, Usage: "with --serve: where the batches go (a directory, file:///abs/dir or s3://bucket/prefix)"},
	s3EndpointFlag, s3RegionFlag, s3PathStyleFlag,
	controlAddrFlag, controlTokenFileFlag, controlTLSCAFlag,
	&cli.StringFlag{Name: "out", Usage: "with --serve: the export directory (default: a temporary one, removed once the batches are registered)"},
	&cli.StringFlag{Name: "encoding", Value: "float16", Usage: "with --serve: vector encoding in records: float16, float32 or int8"},
	&cli.StringFlag{Name: "compression", Value: "lz4", Usage: "with --serve: SST block compression: lz4, zstd or none"},
	&cli.IntFlag{Name: "parallel", Value: 2, Usage: "with --serve: partitions built at once"},
	&cli.DurationFlag{Name: "wait-delivered", Value: 2 * time.Minute, Usage: "with --serve: keep retrying a snapshot the control plane refuses until Lorry has delivered the older queue records, up to this long"},
}

const publishServeHelp = `
With --serve it also makes the pair servable, in one command: the publication (chunk
version/model) is registered with the control plane as the candidate (live once ready
with --live), and when the serving tier does not hold it yet its snapshot batches are
exported, built, uploaded to --objstore and registered. The live publication keeps
serving meanwhile, and the store goes back to publishing the live pair (against its saved
export state), so Lorry's updates keep reaching what is served; ` + "`pillar promote --store`" + ` switches reads and the store to the candidate in one step,
` + "`pillar rollback`" + ` switches back. Reads can name the candidate before that
(` + "`pillar get --version candidate`" + `, the router's --candidate-fraction).

   pillar publish --store data/store --chunks recursive-s512-o64-54906c2d --model hash:dim=384 \
       --serve --objstore data/objects --control 127.0.0.1:7000 --token-file control.token --wait 5m
   pillar publish --store data/store --chunks recursive-s512-o64-54906c2d --model hash:dim=384 \
       --serve --live --objstore data/objects --wait 10m --json`

// rollbackStoreFlag is --store, optional for `pillar rollback --control`
// (the serving tier alone).
var rollbackStoreFlag = func() *cli.StringFlag {
	f := *storeFlag
	f.Required = false
	f.Usage += "; without it, with --control, only the serving tier rolls back"
	return &f
}()

// rollbackServeFlags make `pillar rollback` switch the serving tier too.
var rollbackServeFlags = []cli.Flag{
	&cli.StringFlag{Name: "control", EnvVars: []string{envControl}, Usage: "control-plane address host:port: make the previous publication live there too (one step with the store's rollback)"},
	controlTokenFileFlag, controlTLSCAFlag,
	&cli.BoolFlag{Name: "force", Usage: "with --control: switch even if not every replica still holds the previous publication"},
}

const rollbackHelp = `Makes the previous publication live again. With --control the serving tier switches first
(every router reads the previous publication within about a second: no export, no SST
build), then the store publishes the previous pair again against its own saved export
state, queueing only the pages that changed meanwhile for Lorry. Run it again to roll
forward. With nothing retained it names the retained publications and how to rebuild.

Examples:
   pillar rollback --store data/store --control 127.0.0.1:7000 --token-file control.token
   pillar rollback --store data/store --control 127.0.0.1:7000 --dry-run
   pillar rollback --control 127.0.0.1:7000 --json
   pillar rollback --store data/store`

// retainedFunc returns the pipeline's view of what the serving tier holds.
func retainedFunc(pubs []control.PublicationStatus) func(string) bool {
	keep := map[string]bool{}
	for _, p := range pubs {
		if p.Role != control.RoleRetired {
			keep[p.ID] = true
		}
	}
	return func(id string) bool { return keep[id] }
}

// splitPublication splits a publication id into its chunk version and model.
func splitPublication(id string) (cv, model string) {
	cv, model, _ = strings.Cut(id, "/")
	return cv, model
}

// publishServeResult is `pillar publish --serve --json`.
type publishServeResult struct {
	Publish     *pipeline.PublishResult `json:"publish"`
	Publication *pubView                `json:"publication"`
	Export      *bulkexport.Result      `json:"export,omitempty"`
	Waited      time.Duration           `json:"waited"`
	// StoreKept is the store's return to the live pair after a candidate's
	// export (nil when the publication went live, or the live one is not
	// a pair the store can publish, such as the legacy "" publication).
	StoreKept *pipeline.PublishResult `json:"store_kept,omitempty"`
}

// keepStoreOnLive returns the store to the serving tier's live pair after
// publish --serve made it publish candidate cand; nil when there is no live
// pair to return to.
func keepStoreOnLive(c *cli.Context, st pillar.Store, pubs []control.PublicationStatus, cand string) (*pipeline.PublishResult, error) {
	live := ""
	for _, p := range pubs {
		if p.Role == control.RoleLive {
			live = p.ID
		}
	}
	cv, model := splitPublication(live)
	if live == cand || cv == "" || model == "" {
		return nil, nil
	}
	return pipeline.ReturnTo(c.Context, st, cv, model, pipelineOptions(c), &pipeline.PublishOptions{Retained: retainedFunc(pubs)})
}

// runPublishServe is `pillar publish --serve`.
func runPublishServe(c *cli.Context) error {
	if c.Bool("live") && !c.Bool("serve") || c.Duration("wait") > 0 && !c.Bool("serve") {
		return fmt.Errorf("publish: --live and --wait need --serve")
	}
	st, err := openStore(c, false, 0)
	if err != nil {
		return err
	}
	defer st.Close()
	cl, err := dialControl(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx := c.Context
	pubs, _, err := cl.ListPublications(ctx)
	if err != nil {
		return fmt.Errorf("publish --serve: --control %s: %w", c.String("control"), err)
	}
	r, err := pipeline.PublishWith(ctx, st, c.String("chunks"), c.String("model"), pipelineOptions(c), &pipeline.PublishOptions{Retained: retainedFunc(pubs)})
	if err != nil {
		return err
	}
	out := &publishServeResult{Publish: r}
	if r.DryRun {
		if c.Bool("json") {
			return printJSON(c.App.Writer, out)
		}
		role := "the candidate"
		if c.Bool("live") {
			role = "a candidate made live once ready"
		}
		fmt.Fprintf(c.App.Writer, "dry run: would publish chunks %s, model %s and register publication %s as %s; %s\n",
			r.Published.ChunkVersion, r.Published.Model, r.Publication, role, r.Export.Reason)
		return nil
	}
	// A bulk mark left by an earlier run whose export did not finish is
	// this run's work too.
	needExport := r.Export.Bulk
	if !needExport {
		if needExport, err = bulkMarked(ctx, st); err != nil {
			return err
		}
	}
	if needExport && c.String("objstore") == "" {
		return fmt.Errorf("publish --serve: publication %s needs a snapshot in the serving tier: give --objstore (where its batches go); the store now publishes the pair, so rerunning with --objstore exports it", r.Publication)
	}
	// Registered before its batches, so the first snapshot finds it as the
	// candidate (a batch of an unknown publication would register it to be
	// promoted once ready).
	ch, err := cl.RegisterPublication(ctx, r.Publication, c.Bool("live"))
	if err != nil {
		return err
	}
	if needExport {
		if out.Export, err = servingExport(c, st, cl); err != nil {
			return fmt.Errorf("publish --serve: the store publishes %s and the control plane has it as %s, but its export failed (rerun the same command): %w", r.Publication, ch.Publication.Role, err)
		}
	}
	// A candidate is evaluated beside the live publication: the store goes
	// back to publishing the live pair (against its saved export state, so
	// nothing is queued unless pages changed meanwhile), so that Lorry's
	// updates keep reaching what is served. The candidate's export state is
	// saved by that step; `pillar promote --store` returns the store to it
	// the same way.
	if ch.Publication.Role == control.RoleCandidate {
		if out.StoreKept, err = keepStoreOnLive(c, st, pubs, r.Publication); err != nil {
			return fmt.Errorf("publish --serve: %s is a candidate and exported, but the store did not return to the live pair (rerun the same command): %w", r.Publication, err)
		}
	}
	if !c.Bool("json") {
		printPublish(c, "published", r)
		if out.StoreKept != nil {
			fmt.Fprintf(c.App.Writer, "  store: keeps publishing the live pair %s (export state %s: %d puts, %d deletes queued) while %s is a candidate; `pillar promote --store` moves it\n",
				pubLabel(out.StoreKept.Publication), out.StoreKept.ExportState, out.StoreKept.Export.Puts, out.StoreKept.Export.Deletes, r.Publication)
		}
		fmt.Fprintf(c.App.Writer, "  serving: publication %s is %s", r.Publication, ch.Publication.Role)
		if c.Bool("live") && ch.Publication.Role != control.RoleLive {
			fmt.Fprint(c.App.Writer, " (live once every replica holds it)")
		}
		fmt.Fprintln(c.App.Writer)
		if out.Export != nil && out.Export.Build != nil {
			fmt.Fprintf(c.App.Writer, "  exported %d snapshot batches in %s\n", len(out.Export.Build.Partitions), out.Export.Build.Elapsed.Round(time.Millisecond))
		}
	}
	if w := c.Duration("wait"); w > 0 {
		start := time.Now()
		ps, err := waitPublication(c, cl, r.Publication, c.Bool("live"), w)
		out.Waited = time.Since(start)
		if ps != nil {
			out.Publication = newPubView(ps)
		}
		if err != nil {
			return err
		}
	} else if ps, err := findPublication(ctx, cl, r.Publication); err == nil {
		out.Publication = newPubView(ps)
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, out)
	}
	if c.Duration("wait") > 0 {
		fmt.Fprintf(c.App.Writer, "  ready: every replica holds %s (%s) after %s\n", r.Publication, out.Publication.Role, out.Waited.Round(time.Millisecond))
	} else if ch.Publication.Role == control.RoleCandidate {
		fmt.Fprintf(c.App.Writer, "  next: `pillar versions --control %s` shows its readiness; `pillar promote --control %s` makes it live\n", c.String("control"), c.String("control"))
	}
	return nil
}

// bulkMarked reports whether the store has a bulk rebuild marked.
func bulkMarked(ctx context.Context, st pillar.Store) (bool, error) {
	sn, err := st.Snapshot(ctx)
	if err != nil {
		return false, err
	}
	defer sn.Release()
	err = sn.Attr(ctx, pipeline.AttrBulk, new(pipeline.BulkMark))
	if errors.Is(err, pillar.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// servingExport runs the bulk export protocol for the published pair.
func servingExport(c *cli.Context, st pillar.Store, cl *control.Client) (*bulkexport.Result, error) {
	objs, err := sstOpenStore(c, c.String("objstore"))
	if err != nil {
		return nil, fmt.Errorf("--objstore: %w", err)
	}
	cp, err := cl.Partitions(c.Context)
	if err != nil {
		return nil, fmt.Errorf("--control %s: %w", c.String("control"), err)
	}
	dir := c.String("out")
	id := strings.ToLower(filepath.Base(dir))
	if dir == "" {
		tmp, err := os.MkdirTemp("", "pillar-serve-export-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp)
		id = fmt.Sprintf("serve-%d", time.Now().UnixMilli())
		dir = filepath.Join(tmp, id)
	}
	return runBulkExport(c, st, objs, cl, cp, dir, id)
}

func findPublication(ctx context.Context, cl *control.Client, id string) (*control.PublicationStatus, error) {
	pubs, _, err := cl.ListPublications(ctx)
	if err != nil {
		return nil, err
	}
	for i := range pubs {
		if pubs[i].ID == id {
			return &pubs[i], nil
		}
	}
	return nil, fmt.Errorf("publication %q is not registered with the control plane", id)
}

// currentReplicas counts the replicas that applied the publication's
// newest snapshot of their partition, and names the others.
func currentReplicas(ps *control.PublicationStatus) (current int, lagging []string) {
	for p, s := range ps.NewestSnapshot {
		if s == 0 {
			lagging = append(lagging, fmt.Sprintf("p%d (no snapshot yet)", p))
		}
	}
	for _, r := range ps.Replicas {
		need := int64(0)
		if r.Partition < len(ps.NewestSnapshot) {
			need = ps.NewestSnapshot[r.Partition]
		}
		if need > 0 && r.AppliedSeq >= need && r.Holding {
			current++
		} else if need > 0 {
			lagging = append(lagging, fmt.Sprintf("%s/p%d (%s, applied %d, needs %d)", r.NodeID, r.Partition, r.State, r.AppliedSeq, need))
		}
	}
	return current, lagging
}

// waitPublication waits until every assigned replica applied the
// publication's newest snapshot (and, when live, it is live), printing
// progress as it changes; on timeout it names the lagging replicas.
func waitPublication(c *cli.Context, cl *control.Client, id string, live bool, timeout time.Duration) (*control.PublicationStatus, error) {
	ctx, cancel := context.WithTimeout(c.Context, timeout)
	defer cancel()
	var version int64
	last := ""
	var ps *control.PublicationStatus
	for {
		var err error
		if ps, err = findPublication(c.Context, cl, id); err != nil {
			return nil, err
		}
		cur, lag := currentReplicas(ps)
		done := len(lag) == 0 && ps.Assigned > 0 && (!live || ps.Role == control.RoleLive)
		line := fmt.Sprintf("  waiting: %d of %d replicas hold the newest snapshot of %s (%s)", cur, ps.Assigned, id, ps.Role)
		if line != last && !c.Bool("json") && !done {
			fmt.Fprintln(os.Stderr, line)
			last = line
		}
		if done {
			return ps, nil
		}
		if ps.Role == control.RoleRetired {
			return ps, fmt.Errorf("publish --serve --wait: publication %s was retired meanwhile", id)
		}
		r, err := cl.WatchRouting(ctx, version, time.Second)
		if ctx.Err() != nil {
			more := ""
			if len(lag) > 20 {
				more = fmt.Sprintf(" and %d more", len(lag)-20)
				lag = lag[:20]
			}
			why := "lagging: " + strings.Join(lag, ", ") + more
			if len(lag) == 0 && live {
				why = "every replica holds it but it is not live: " + ps.Role
			}
			return ps, fmt.Errorf("publish --serve --wait: %s not ready after %s: %d of %d replicas hold its newest snapshot; %s (the export is registered: keep waiting with `pillar versions --control %s`)",
				id, timeout, cur, ps.Assigned, why, c.String("control"))
		}
		if err == nil {
			version = r.Version
		} else {
			select { // the control plane may be restarting: poll
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
}

// runRollbackServe is `pillar rollback --control` (with or without --store).
func runRollbackServe(c *cli.Context) error {
	ctx := c.Context
	cl, err := dialControl(c)
	if err != nil {
		return err
	}
	defer cl.Close()
	pubs, live, err := cl.ListPublications(ctx)
	if err != nil {
		return fmt.Errorf("rollback: --control %s: %w", c.String("control"), err)
	}
	var prev *control.PublicationStatus
	for i := range pubs {
		if pubs[i].Role == control.RolePrevious {
			prev = &pubs[i]
		}
	}
	var st pillar.Store
	if c.String("store") != "" {
		if st, err = openStore(c, false, 0); err != nil {
			return err
		}
		defer st.Close()
	}
	// The store must publish what the control plane serves, or be the one
	// step behind an interrupted rollback (serving switched, store not):
	// then only the store's part is left.
	finishing := false
	target := "" // the publication the store returns to
	if prev != nil {
		target = prev.ID
	}
	if st != nil {
		cur, _, err := storePair(ctx, st)
		if err != nil {
			return err
		}
		switch {
		case prev != nil && cur == prev.ID && cur != live:
			finishing, target = true, live
		case cur != live:
			return fmt.Errorf("rollback: the store publishes %q but the serving tier's live publication is %q (a candidate not promoted yet? `pillar promote` it, or `pillar publish` the live pair); nothing changed", cur, live)
		}
		if cv, model := splitPublication(target); prev != nil && (cv == "" || model == "") {
			return fmt.Errorf("rollback: the previous publication %s is not a (chunk version, model) pair the store can publish; roll back the serving tier alone (without --store)", pubLabel(target))
		}
	}
	if prev == nil {
		return noPreviousError(pubs, live)
	}
	res := &rollbackResult{}
	if !finishing {
		res.Previous = newPubView(prev)
		if c.Bool("dry-run") {
			res.DryRun = true
		} else {
			start := time.Now()
			ch, err := cl.Rollback(ctx, c.Bool("force"))
			if err != nil {
				return err
			}
			res.Switched, res.SwitchTook, res.WasLive, res.Live, res.RoutingVersion = true, time.Since(start), ch.WasLive, ch.Publication.ID, ch.RoutingVersion
		}
	}
	if st != nil {
		pubs, _, _ = cl.ListPublications(ctx)
		cv, model := splitPublication(target)
		r, err := pipeline.ReturnTo(ctx, st, cv, model, pipelineOptions(c), &pipeline.PublishOptions{Retained: retainedFunc(pubs)})
		if err != nil {
			if res.Switched {
				return fmt.Errorf("rollback: serving switched to %s, but the store's rollback failed (rerun `pillar rollback` with the same flags to finish it): %w", res.Live, err)
			}
			return err
		}
		res.Store = r
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, res)
	}
	w := c.App.Writer
	switch {
	case res.DryRun:
		fmt.Fprintf(w, "dry run: would make %s live again (held by %d of %d replicas) and %s previous", prev.ID, prev.Holding, prev.Assigned, live)
		if res.Store != nil {
			fmt.Fprintf(w, "; store: %s", res.Store.Export.Reason)
		}
		fmt.Fprintln(w)
		return nil
	case finishing:
		fmt.Fprintf(w, "serving already switched to %s by an interrupted rollback; finished the store's part\n", target)
	default:
		fmt.Fprintf(w, "rolled back serving to %s (was %s) in %s, routing version %d: no export, no SST build\n",
			res.Live, res.WasLive, res.SwitchTook.Round(time.Millisecond), res.RoutingVersion)
	}
	if r := res.Store; r != nil {
		fmt.Fprintf(w, "  store: publishes chunks %s, model %s again", r.Published.ChunkVersion, r.Published.Model)
		switch r.ExportState {
		case pipeline.StateSaved:
			fmt.Fprintf(w, " against its saved export state: %d puts and %d deletes queued for what changed since\n", r.Export.Puts, r.Export.Deletes)
		case pipeline.StateNew:
			fmt.Fprintf(w, "; its export state was not saved (published before serving versions): %s\n", r.Export.Reason)
		default:
			fmt.Fprintln(w)
			printPlan(r.Export)
		}
	} else {
		fmt.Fprintln(w, "  store: unchanged (no --store): Lorry keeps delivering for the pair the store publishes")
	}
	fmt.Fprintln(w, "  `pillar rollback` again rolls forward")
	return nil
}

// rollbackResult is `pillar rollback --control --json`.
type rollbackResult struct {
	DryRun         bool                    `json:"dry_run,omitempty"`
	Switched       bool                    `json:"switched"`
	Live           string                  `json:"live,omitempty"`
	WasLive        string                  `json:"was_live,omitempty"`
	RoutingVersion int64                   `json:"routing_version,omitempty"`
	SwitchTook     time.Duration           `json:"switch"`
	Previous       *pubView                `json:"previous,omitempty"`
	Store          *pipeline.PublishResult `json:"store,omitempty"`
}

// storePair returns the store's published and previous publication ids.
func storePair(ctx context.Context, st pillar.Store) (cur, prev string, err error) {
	sn, err := st.Snapshot(ctx)
	if err != nil {
		return "", "", err
	}
	defer sn.Release()
	if p, err := pillar.LoadPublished(ctx, sn); err == nil {
		cur = pillar.EmbedVersionID(p.ChunkVersion, p.Model)
	}
	var p pillar.Published
	if err := sn.Attr(ctx, pillar.AttrPrevious, &p); err == nil {
		prev = pillar.EmbedVersionID(p.ChunkVersion, p.Model)
	} else if !errors.Is(err, pillar.ErrNotFound) {
		return "", "", err
	}
	return cur, prev, nil
}

// noPreviousError is the rollback error with nothing to go back to.
func noPreviousError(pubs []control.PublicationStatus, live string) error {
	var kept, gone []string
	for _, p := range pubs {
		if p.Role == control.RoleRetired {
			gone = append(gone, p.ID)
			continue
		}
		kept = append(kept, fmt.Sprintf("%s (%s)", pubLabel(p.ID), p.Role))
	}
	msg := "rollback: no previous publication is retained to go back to"
	if len(kept) > 0 {
		msg += "; retained: " + strings.Join(kept, ", ")
	}
	if len(gone) > 0 {
		cv, model := splitPublication(gone[len(gone)-1])
		msg += fmt.Sprintf("; to serve a retired one again, rebuild it: `pillar publish --serve --chunks %s --model %s --objstore …` (exports it), then `pillar promote`", cv, model)
	} else {
		msg += "; a rollback needs a second publication: `pillar publish --serve` another pair, `pillar promote` it, then `pillar rollback` returns to " + pubLabel(live)
	}
	return errors.New(msg)
}

func pubLabel(id string) string {
	if id == "" {
		return `"" (legacy)`
	}
	return id
}

func promoteCommand() *cli.Command {
	return &cli.Command{
		Name:  "promote",
		Usage: "make the candidate publication (or a retained one) live in the serving tier",
		Description: `Switches every router's default reads to the candidate publication in one step (the live
one becomes previous, for ` + "`pillar rollback`" + `; the one previous before is retired).
A candidate that not every replica holds yet is refused, naming the lagging replicas;
--force promotes it anyway (reads of keys on lagging replicas fail over or fail).
--publication promotes a retained publication by id (a roll-forward by name). With --store,
the store then publishes the new live pair too (against its saved export state) when it
published another one, so Lorry's updates go to what is served.

Examples:
   pillar promote --control 127.0.0.1:7000 --token-file control.token
   pillar promote --control 127.0.0.1:7000 --force
   pillar promote --publication recursive-s512-o64-54906c2d/hash-d384-ea4b8133 --store data/store --json`,
		Flags: controlClientFlags(
			&cli.StringFlag{Name: "publication", Usage: "publication id (chunk version/model) to promote (default: the candidate)"},
			&cli.BoolFlag{Name: "force", Usage: "promote even if not every replica holds it"},
			rollbackStoreFlag, // optional: the store follows the new live pair
			controlJSONFlag,
		),
		Action: func(c *cli.Context) error {
			cl, err := dialControl(c)
			if err != nil {
				return err
			}
			defer cl.Close()
			start := time.Now()
			ch, err := cl.Promote(c.Context, c.String("publication"), c.Bool("force"))
			if err != nil {
				return err
			}
			took := time.Since(start)
			store, err := storeFollows(c, cl, ch.Publication.ID)
			if err != nil {
				return fmt.Errorf("promote: serving switched to %s, but the store did not follow (rerun with the same flags): %w", pubLabel(ch.Publication.ID), err)
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, map[string]any{"live": ch.Publication.ID, "was_live": ch.WasLive, "unchanged": ch.Unchanged,
					"routing_version": ch.RoutingVersion, "switch_ms": took.Milliseconds(), "store": store})
			}
			if store != nil {
				defer fmt.Fprintf(c.App.Writer, "  store: now publishes %s (export state %s: %d puts, %d deletes queued)\n", pubLabel(ch.Publication.ID), store.ExportState, store.Export.Puts, store.Export.Deletes)
			}
			if ch.Unchanged {
				fmt.Fprintf(c.App.Writer, "%s is live already\n", pubLabel(ch.Publication.ID))
				return nil
			}
			fmt.Fprintf(c.App.Writer, "promoted %s to live (was %s, now previous) in %s, routing version %d\n  `pillar rollback` returns to %s\n",
				pubLabel(ch.Publication.ID), pubLabel(ch.WasLive), took.Round(time.Millisecond), ch.RoutingVersion, pubLabel(ch.WasLive))
			if c.String("store") == "" {
				fmt.Fprintf(c.App.Writer, "  store: not given: if it publishes another pair, Lorry's updates go there; `pillar promote --store DIR` (rerun: serving is switched already) makes it follow\n")
			}
			return nil
		},
	}
}

// storeFollows makes the store (--store, when given) publish the serving
// tier's live publication if it publishes another pair; nil when nothing
// was to do.
func storeFollows(c *cli.Context, cl *control.Client, live string) (*pipeline.PublishResult, error) {
	if c.String("store") == "" {
		return nil, nil
	}
	st, err := openStore(c, false, 0)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	cur, _, err := storePair(c.Context, st)
	if err != nil || cur == live {
		return nil, err
	}
	cv, model := splitPublication(live)
	if cv == "" || model == "" {
		return nil, fmt.Errorf("the live publication %s is not a (chunk version, model) pair the store can publish", pubLabel(live))
	}
	pubs, _, err := cl.ListPublications(c.Context)
	if err != nil {
		return nil, err
	}
	return pipeline.ReturnTo(c.Context, st, cv, model, pipelineOptions(c), &pipeline.PublishOptions{Retained: retainedFunc(pubs)})
}

func retireCommand() *cli.Command {
	return &cli.Command{
		Name:  "retire",
		Usage: "retire a publication that is not live: nodes drop it and its batches are deleted after the grace period",
		Description: `A retired publication is no longer served or kept: nodes drop its database and the
control plane deletes its batches (and their objects) once its grace period (control
--retire-grace) is over. Registering it again within the grace period keeps what is left.

Examples:
   pillar retire --publication recursive-s512-o64-54906c2d/hash-d384-ea4b8133 --control 127.0.0.1:7000 --token-file control.token
   pillar retire --publication tokens-s256-o32-1f2e3d4c/hash-d384-ea4b8133 --json`,
		Flags: controlClientFlags(
			&cli.StringFlag{Name: "publication", Required: true, Usage: "publication id (chunk version/model)"},
			controlJSONFlag,
		),
		Action: func(c *cli.Context) error {
			cl, err := dialControl(c)
			if err != nil {
				return err
			}
			defer cl.Close()
			ch, err := cl.Retire(c.Context, c.String("publication"))
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, map[string]any{"publication": ch.Publication.ID, "role": ch.Publication.Role, "unchanged": ch.Unchanged, "routing_version": ch.RoutingVersion})
			}
			if ch.Unchanged {
				fmt.Fprintf(c.App.Writer, "%s was retired already\n", pubLabel(ch.Publication.ID))
				return nil
			}
			fmt.Fprintf(c.App.Writer, "retired %s: its batches are deleted after the grace period\n", pubLabel(ch.Publication.ID))
			return nil
		},
	}
}

// pubView is one publication as `versions` and `status` show it.
type pubView struct {
	ID               string           `json:"id"`
	ChunkVersion     string           `json:"chunk_version,omitempty"`
	Model            string           `json:"model,omitempty"`
	Role             string           `json:"role"`
	Ready            bool             `json:"ready"`
	Holding          int              `json:"replicas_holding"`
	Assigned         int              `json:"replicas_assigned"`
	Current          int              `json:"replicas_current"` // applied its newest snapshot
	PromoteWhenReady bool             `json:"promote_when_ready,omitempty"`
	BaseSeq          []int64          `json:"base_seq"`
	NewestSnapshot   []int64          `json:"newest_snapshot"`
	BytesByNode      map[string]int64 `json:"bytes_by_node"` // its databases on each node, all partitions
	Lagging          []string         `json:"lagging,omitempty"`
	RoleAt           time.Time        `json:"role_at"`
}

func newPubView(ps *control.PublicationStatus) *pubView {
	cv, model := splitPublication(ps.ID)
	v := &pubView{ID: ps.ID, ChunkVersion: cv, Model: model, Role: ps.Role, Ready: ps.Ready, Holding: ps.Holding, Assigned: ps.Assigned,
		PromoteWhenReady: ps.PromoteWhenReady, BaseSeq: ps.BaseSeq, NewestSnapshot: ps.NewestSnapshot, BytesByNode: map[string]int64{}, RoleAt: ps.RoleAt}
	v.Current, _ = currentReplicas(ps)
	for _, r := range ps.Replicas {
		v.BytesByNode[r.NodeID] += r.Bytes
	}
	if ps.Role != control.RoleRetired {
		v.Lagging = ps.Lagging()
	}
	return v
}

// servingPublications reads the control plane's publications.
func servingPublications(ctx context.Context, cl *control.Client) ([]*pubView, string, error) {
	pubs, live, err := cl.ListPublications(ctx)
	if err != nil {
		return nil, "", err
	}
	out := make([]*pubView, len(pubs))
	for i := range pubs {
		out[i] = newPubView(&pubs[i])
	}
	return out, live, nil
}

// printPublications prints the serving publications as a table: role,
// readiness, replicas holding it, and its bytes on each node.
func printPublications(w io.Writer, pubs []*pubView, live string) error {
	if len(pubs) == 0 {
		_, err := fmt.Fprintln(w, "serving: no publication registered yet (`pillar publish --serve` registers one; legacy batches serve as publication \"\")")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PUBLICATION\tROLE\tREADY\tHOLDING\tCURRENT\tBYTES PER REPLICA (node=bytes)")
	for _, p := range pubs {
		nodes := make([]string, 0, len(p.BytesByNode))
		for n := range p.BytesByNode {
			nodes = append(nodes, n)
		}
		sort.Strings(nodes)
		var bytes []string
		for _, n := range nodes {
			b := "?"
			if p.BytesByNode[n] > 0 {
				b = humanBytes(p.BytesByNode[n])
			}
			bytes = append(bytes, n+"="+b)
		}
		ready := "no"
		if p.Ready {
			ready = "yes"
		}
		role := p.Role
		if p.PromoteWhenReady {
			role += " (live once ready)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%d/%d\t%s\n", pubLabel(p.ID), role, ready, p.Holding, p.Assigned, p.Current, p.Assigned, strings.Join(bytes, " "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range pubs {
		if p.Role != control.RoleRetired && len(p.Lagging) > 0 && len(p.Lagging) <= 8 {
			fmt.Fprintf(w, "  %s lagging: %s\n", pubLabel(p.ID), strings.Join(p.Lagging, ", "))
		} else if p.Role != control.RoleRetired && len(p.Lagging) > 8 {
			fmt.Fprintf(w, "  %s lagging: %s and %d more\n", pubLabel(p.ID), strings.Join(p.Lagging[:8], ", "), len(p.Lagging)-8)
		}
	}
	_, err := fmt.Fprintf(w, "live: %s\n", pubLabel(live))
	return err
}

// versionsControlFlag adds the serving publications to `pillar versions`.
var versionsControlFlag = &cli.StringFlag{Name: "control", EnvVars: []string{envControl},
	Usage: "control-plane address host:port: also show the serving publications (role, replicas holding each, ready, bytes per replica)"}

// printVersionsServing is the serving part of `pillar versions --control`
// (nil, nil without --control).
func versionsServing(c *cli.Context) ([]*pubView, string, error) {
	if c.String("control") == "" {
		return nil, "", nil
	}
	cl, err := dialControl(c)
	if err != nil {
		return nil, "", err
	}
	defer cl.Close()
	pubs, live, err := servingPublications(c.Context, cl)
	if err != nil {
		return nil, "", fmt.Errorf("versions: --control %s: %w", c.String("control"), err)
	}
	return pubs, live, nil
}

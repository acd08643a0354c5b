package demo

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pillarkit/pillar/jobs/pipeline"
	"github.com/pillarkit/pillar/lorry"
	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/pillar/ingest"
	"github.com/pillarkit/pillar/subsets"
	"gopkg.in/yaml.v3"
)

// editCount is how many pages step 6 edits.
const editCount = 5

// removeCount is the most pages step 6's policy change removes.
const removeCount = 3

// step6 changes pages and a policy, both chosen from what the store holds,
// delivers the changes with Lorry and checks that each one arrived. A step
// that should change something and changes nothing fails the run.
func (d *demo) step6() error {
	return d.stage("6. incremental: change pages and a policy, deliver with Lorry", func() error {
		inc := &d.rep.Incremental
		before, err := d.exportedPages()
		if err != nil {
			return err
		}
		edited, err := d.editExported(before)
		if err != nil {
			return err
		}
		for _, e := range edited {
			inc.Edited = append(inc.Edited, e.rel)
		}
		stats, err := ingest.Run(d.ctx, d.st, d.ingestOptions())
		if err != nil {
			return err
		}
		inc.ChangedPages = stats.ChangedPages()
		d.say("    edited %d files of exported pages (%s); ingest: %d changed pages", len(edited), strings.Join(inc.Edited, ", "), inc.ChangedPages)
		if inc.ChangedPages != len(edited) {
			return fmt.Errorf("edited %d files, but ingest counted %d changed pages (%d new, %d changed)", len(edited), inc.ChangedPages, stats.New, stats.Changed)
		}
		o := pipeline.Options{Logger: d.o.Logger}
		r, err := pipeline.Rechunk(d.ctx, d.st, chunkerV2, o)
		if err != nil {
			return err
		}
		if _, err := pipeline.Embed(d.ctx, d.st, r.Version, model, o); err != nil {
			return err
		}
		p, err := pipeline.Publish(d.ctx, d.st, r.Version, model, o)
		if err != nil {
			return err
		}
		inc.PublishPuts = p.Export.Puts
		d.say("    incremental backfill: %d pages re-chunked; re-publish queued %d puts", r.PendingPages, inc.PublishPuts)
		if inc.PublishPuts < len(edited) {
			return fmt.Errorf("%d exported pages changed, but the re-publish queued %d puts", len(edited), inc.PublishPuts)
		}

		set2, removed, err := d.policyChange(edited)
		if err != nil {
			return err
		}
		rc, err := pipeline.Recompute(d.ctx, d.st, set2, d.asOf, o)
		if err != nil {
			return err
		}
		if rc.Export != nil {
			inc.Puts, inc.Deletes = rc.Export.Puts, rc.Export.Deletes
		}
		d.say("    policy change (%d of the %d pages of %q out of every exported subset): queued %d puts, %d deletes",
			len(removed), inc.SubsetSize, inc.PolicySubset, inc.Puts, inc.Deletes)
		switch {
		case rc.Export == nil || inc.Puts+inc.Deletes == 0:
			return fmt.Errorf("the policy change removed %d pages from every exported subset, but the recompute queued no puts and no deletes", len(removed))
		case rc.Export.Bulk:
			return fmt.Errorf("the policy change went to a bulk rebuild instead of Lorry: %s", rc.Export.Reason)
		case inc.Deletes < len(removed):
			return fmt.Errorf("the policy change removed %d pages from every exported subset, but the recompute queued %d deletes", len(removed), inc.Deletes)
		}
		ls, err := lorry.Status(d.ctx, d.st, time.Now())
		if err != nil {
			return err
		}
		depth := int64(0)
		for _, s := range ls {
			depth += s.Depth
		}
		d.say("    export queue: %d undelivered records; running Lorry", depth)
		t0 := time.Now()
		if inc.Batches, err = d.drainLorry(); err != nil {
			return err
		}
		if _, err := d.cl.waitConverged(d.ctx, 2*time.Minute); err != nil {
			return err
		}
		d.rep.ConvergeLorry = time.Since(t0)
		d.say("    Lorry delivered %d delta batches; readable on every replica %s after the drain started", inc.Batches, d.rep.ConvergeLorry.Round(time.Millisecond))
		if inc.Batches == 0 {
			return fmt.Errorf("%d records were queued, but Lorry delivered 0 batches", depth)
		}

		want, err := d.exportedPages()
		if err != nil {
			return err
		}
		for _, e := range edited {
			w, ok := want[e.key]
			switch {
			case !ok:
				return fmt.Errorf("edited page %s (%s) is no longer exported", e.rel, e.url)
			case w.hash == e.oldHash:
				return fmt.Errorf("edited page %s (%s): the store still has its old content hash %s", e.rel, e.url, e.oldHash)
			}
		}
		n, err := d.readAll(want, r.Version, nil)
		if err != nil {
			return err
		}
		inc.Verified, inc.EditedRead = n, len(edited)
		for _, rm := range removed {
			if _, ok := want[rm.key]; ok {
				return fmt.Errorf("page %s was removed from every exported subset but is still in export/state", rm.url)
			}
			k, _ := pillar.ParseKey(rm.key)
			res, err := d.rt.BatchGet(d.ctx, [][]byte{k[:]})
			if err != nil {
				return err
			}
			if res[0].Found {
				return fmt.Errorf("page %s was removed from every exported subset but is still served", rm.url)
			}
			inc.Gone++
		}
		d.say("    verified: %d records match the store, the %d edited pages with their new content hash; the %d removed pages are gone",
			inc.Verified, inc.EditedRead, inc.Gone)
		return nil
	})
}

// editedPage is a page step 6 edited.
type editedPage struct {
	key, url, rel, oldHash string
}

// editExported edits the files of up to editCount exported pages, spread
// over the exported pages in key order, and returns them. It reads each
// edited file back the way ingest does, so only an edit that changes the
// page's content hash counts; it fails when no exported page could be
// edited.
func (d *demo) editExported(exported map[string]expected) ([]editedPage, error) {
	if d.crawl {
		return d.recrawlExported(exported)
	}
	// The file of each exported page: the first in walk order, as in ingest.
	src := filepath.Join(d.o.Out, "corpus")
	opts := d.ingestOptions()
	fileOf := map[string]string{}
	err := filepath.WalkDir(src, func(p string, de fs.DirEntry, err error) error {
		if err != nil || de.IsDir() || !de.Type().IsRegular() || !ingest.Candidate(p) {
			return nil
		}
		f := ingest.ReadFile(p, opts)
		if _, ok := exported[f.Doc.PageKey]; ok && f.Outcome == "" && f.Doc.Text != "" {
			if _, seen := fileOf[f.Doc.PageKey]; !seen {
				fileOf[f.Doc.PageKey] = p
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(fileOf))
	for k := range fileOf {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	// Spread the picks: every len/editCount-th key first, then the rest.
	step := max(1, len(keys)/editCount)
	var order []string
	for off := 0; off < step; off++ {
		for i := off; i < len(keys); i += step {
			order = append(order, keys[i])
		}
	}
	// Leave one page unedited, so the policy change has one to remove.
	limit := editCount
	if len(keys) >= 2 {
		limit = min(editCount, len(keys)-1)
	}
	stamp := time.Now().UTC().Format(time.RFC3339Nano)
	var out []editedPage
	for _, k := range order {
		if len(out) == limit {
			break
		}
		path := fileOf[k]
		ok, err := editFile(path, stamp, opts, exported[k].hash)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, editedPage{key: k, url: exported[k].url, rel: relSlash(src, path), oldHash: exported[k].hash})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no exported page could be edited (%d exported pages, %d with a file and text): the incremental checks would test nothing", len(exported), len(keys))
	}
	return out, nil
}

// recrawlExported is editExported for a crawl corpus: a WARC of the
// crawler fetching up to editCount exported pages again, now, with new
// content (d.recrawl, which step 6 ingests). All but one exported page
// stay as they were, so the policy change has one to remove.
func (d *demo) recrawlExported(exported map[string]expected) ([]editedPage, error) {
	keys := make([]string, 0, len(exported))
	for k := range exported {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	limit := editCount
	if len(keys) >= 2 {
		limit = min(editCount, len(keys)-1)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("no exported page to re-crawl: the incremental checks would test nothing")
	}
	step := max(1, len(keys)/limit)
	path := filepath.Join(d.o.Out, "recrawl.warc.gz")
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	now := time.Now().UTC()
	var out []editedPage
	for i := 0; i < len(keys) && len(out) < limit; i += step {
		k := keys[i]
		e := exported[k]
		body := fmt.Sprintf("<html><head><title>Re-crawled page</title></head><body><p>The crawler fetched %s again at %s and found it changed.</p></body></html>",
			e.url, now.Format(time.RFC3339Nano))
		if err := ingest.WriteWARCResponse(f, e.url, now, "text/html; charset=utf-8", body); err != nil {
			return nil, err
		}
		out = append(out, editedPage{key: k, url: e.url, rel: "recrawl.warc.gz: " + e.url, oldHash: e.hash})
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	d.recrawl = path
	return out, nil
}

func relSlash(root, p string) string {
	r, _ := filepath.Rel(root, p)
	return filepath.ToSlash(r)
}

// editFile adds a paragraph to the page at path and reports whether its
// content hash changed; when it did not (the paragraph landed in dropped
// boilerplate), the file is put back.
func editFile(path, stamp string, opts ingest.Options, oldHash string) (bool, error) {
	orig, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return false, err
	}
	add := "Demo edit at " + stamp + ": this paragraph was added to show an incremental update."
	s := string(orig)
	body := max(strings.LastIndex(s, "</body>"), strings.LastIndex(s, "</BODY>"))
	switch ext := strings.ToLower(filepath.Ext(path)); {
	case ext == ".txt" || ext == ".md" || ext == ".text":
		s += "\n\n" + add + "\n"
	case body >= 0:
		s = s[:body] + "<p>" + add + "</p>" + s[body:]
	default:
		s += "<p>" + add + "</p>"
	}
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		return false, err
	}
	if f := ingest.ReadFile(path, opts); f.Outcome == "" && f.Doc.ContentHash != oldHash {
		return true, nil
	}
	if err := os.WriteFile(path, orig, 0o644); err != nil {
		return false, err
	}
	return false, os.Chtimes(path, fi.ModTime(), fi.ModTime())
}

// policyChange derives a policy change from the subsets step 2 computed:
// it takes the largest exported subset and removes a few of its pages
// (never all, never an edited one) from every exported subset. It returns
// the changed policies and the removed pages.
func (d *demo) policyChange(edited []editedPage) (*subsets.Set, []editedPage, error) {
	inc := &d.rep.Incremental
	var target pipeline.SubsetSummary
	for _, s := range d.rep.Subsets {
		if s.Exported && s.Size > target.Size {
			target = s
		}
	}
	if target.Size < 2 {
		return nil, nil, fmt.Errorf("no exported subset has 2 pages or more (largest: %q, %d): a policy change that removes some but not all of its pages cannot be made", target.Name, target.Size)
	}
	inc.PolicySubset, inc.SubsetSize = target.Name, target.Size
	skip := map[string]bool{}
	for _, e := range edited {
		skip[e.key] = true
	}
	sn, err := d.st.Snapshot(d.ctx)
	if err != nil {
		return nil, nil, err
	}
	defer sn.Release()
	rr, err := sn.ReadTable(d.ctx, pillar.SubsetTable(target.Name), nil)
	if err != nil {
		return nil, nil, err
	}
	limit := min(removeCount, target.Size-1)
	var picked []string
	for len(picked) < limit && rr.Next() {
		var m pillar.SubsetMember
		if err := rr.Scan(&m); err != nil {
			rr.Close()
			return nil, nil, err
		}
		if !skip[m.PageKey] {
			picked = append(picked, m.PageKey)
		}
	}
	rr.Close()
	if err := rr.Err(); err != nil {
		return nil, nil, err
	}
	if len(picked) == 0 {
		return nil, nil, fmt.Errorf("subset %q has no page left to remove besides the edited ones", target.Name)
	}
	// Their URLs, for the narrative and the report.
	urls := map[string]string{}
	want := map[string]bool{}
	for _, k := range picked {
		want[k] = true
	}
	dr, err := sn.ReadTable(d.ctx, pillar.TableDocs, nil)
	if err != nil {
		return nil, nil, err
	}
	for dr.Next() {
		var doc pillar.Doc
		if err := dr.Scan(&doc); err != nil {
			dr.Close()
			return nil, nil, err
		}
		if want[doc.PageKey] {
			urls[doc.PageKey] = doc.URL
		}
	}
	dr.Close()
	var removed []editedPage
	quoted := make([]string, len(picked))
	for i, k := range picked {
		removed = append(removed, editedPage{key: k, url: urls[k]})
		inc.Removed = append(inc.Removed, urls[k])
		quoted[i] = strconv.Quote(k)
	}
	cut := "not (key in [" + strings.Join(quoted, ", ") + "])"
	src, err := changedPolicies(d.set, cut)
	if err != nil {
		return nil, nil, err
	}
	path := filepath.Join(d.o.Out, "policies-v2.yaml")
	if err := os.WriteFile(path, src, 0o644); err != nil {
		return nil, nil, err
	}
	set2, err := subsets.Parse(path, src)
	if err != nil {
		return nil, nil, fmt.Errorf("the derived policy change does not parse: %w", err)
	}
	return set2, removed, nil
}

// changedPolicies writes set's policies as a policy file in which every
// exported policy's where also requires cut. The jobs that evaluate
// policies re-parse their source, so the change is a file, not a value.
func changedPolicies(set *subsets.Set, cut string) ([]byte, error) {
	type top struct {
		K   int    `yaml:"k"`
		Per string `yaml:"per,omitempty"`
		By  string `yaml:"by"`
	}
	type policy struct {
		Name        string `yaml:"name"`
		Exported    bool   `yaml:"exported"`
		Description string `yaml:"description,omitempty"`
		Where       string `yaml:"where,omitempty"`
		Top         *top   `yaml:"top,omitempty"`
		History     int    `yaml:"history"`
	}
	var f struct {
		Signals  map[string]string `yaml:"signals,omitempty"`
		Policies []policy          `yaml:"policies"`
	}
	for name, t := range set.Signals() {
		if f.Signals == nil {
			f.Signals = map[string]string{}
		}
		f.Signals[name] = t.String()
	}
	for _, p := range set.Policies() {
		q := policy{Name: p.Name, Exported: p.Exported, Description: p.Description, Where: p.Where, History: set.History(p.Name)}
		if p.Top != nil {
			q.Top = &top{K: p.Top.K, Per: p.Top.Per, By: p.Top.By}
		}
		if p.Exported {
			if q.Where == "" {
				q.Where = cut
			} else {
				q.Where = "(" + q.Where + ") and " + cut
			}
		}
		f.Policies = append(f.Policies, q)
	}
	b, err := yaml.Marshal(&f)
	if err != nil {
		return nil, err
	}
	return append([]byte("# The demo's policy change: every exported policy's where gained \"and "+cut+"\".\n"), b...), nil
}

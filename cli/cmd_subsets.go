package cli

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pillarkit/pillar/pillar"
	"github.com/pillarkit/pillar/subsets"
)

// subsetsCommand groups the subset-policy commands. recompute, diff and show
// (which need the store) are added as further subcommands.
func subsetsCommand() *cli.Command {
	return &cli.Command{
		Name:  "subsets",
		Usage: "policy-defined page subsets (fresh, high-value, top-K per host, ...)",
		Description: `A subset is a policy-defined group of pages. Policies live in a YAML (or JSON) file:
a name, an exported flag, a predicate over page fields and signals, and an optional
top-K per group. Pages in an exported subset are what the serving tier holds.

The predicate language (see go doc github.com/pillarkit/pillar/subsets):
   age(fetched_at) < 7d and lang == "en"
   score >= 0.8 or host in ["www.postgresql.org", "docs.python.org"]
   url ~ "/docs/15/sql-" and not (text_len < 200)
   top: {k: 1000, per: host, by: score desc}

Fields: url, host, title, lang, key (strings); text_len, out_links, html_bytes (numbers);
fetched_at, updated_at (times). Signals are declared under signals: (number or string)
and named bare or as signal.<name>. Functions: age(time), has(name), time("2026-01-31").
Operators: == != < <= > >= ~ !~ in, not in, and, or, not. Durations: 250ms 30s 5m 12h 7d 2w.
A comparison with a missing signal is unknown (SQL-style three-valued logic); a page is a
member only if its predicate is true.

Examples:
   pillar subsets validate --policies testdata/policies.yaml
   pillar subsets explain --store data/store --policies testdata/policies.yaml \
       --url https://www.postgresql.org/docs/15/sql-select.html`,
		Subcommands: append([]*cli.Command{
			subsetsValidateCommand(),
			subsetsExplainCommand(),
		}, subsetsStoreCommands()...),
	}
}

func subsetsValidateCommand() *cli.Command {
	return &cli.Command{
		Name:  "validate",
		Usage: "check a policy file and list its policies",
		Description: `Parses, type-checks and compiles every policy and reports every error at once, each
as file:line:col with the policy and key at fault (unknown fields, type mismatches such
as score > "high", duplicate names, an empty file, a top-K of 0, bad regular
expressions, ...). Exits 1 if there is any error.

Examples:
   pillar subsets validate --policies testdata/policies.yaml
   pillar subsets validate --policies policies.json --json`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "policies", Usage: "policy file (YAML or JSON)", Required: true, EnvVars: []string{"PILLAR_POLICIES"}},
			&cli.BoolFlag{Name: "json", Usage: "print the policies (or the errors) as JSON"},
		},
		Action: func(c *cli.Context) error {
			path := c.String("policies")
			set, err := subsets.ReadFile(path)
			var list subsets.ErrorList
			if errors.As(err, &list) {
				if c.Bool("json") {
					_ = printJSON(c.App.Writer, map[string]any{"file": path, "valid": false, "errors": list})
				} else {
					for _, e := range list {
						fmt.Fprintln(c.App.ErrWriter, e.Error())
					}
				}
				return fmt.Errorf("subsets validate: %s: %d error(s)", path, len(list))
			}
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return printPoliciesJSON(c.App.Writer, path, set)
			}
			return printPolicies(c.App.Writer, path, set)
		},
	}
}

type policyJSON struct {
	Name        string `json:"name"`
	Exported    bool   `json:"exported"`
	Description string `json:"description,omitempty"`
	Where       string `json:"where"`
	TopK        int    `json:"top_k,omitempty"`
	Per         string `json:"per,omitempty"`
	By          string `json:"by,omitempty"`
	History     int    `json:"history"`
	Fingerprint string `json:"fingerprint"`
}

func printPoliciesJSON(w io.Writer, path string, set *subsets.Set) error {
	var ps []policyJSON
	for _, p := range set.Policies() {
		pj := policyJSON{Name: p.Name, Exported: p.Exported, Description: p.Description,
			Where: strings.Join(strings.Fields(p.Where), " "), History: set.History(p.Name), Fingerprint: set.Fingerprint(p.Name)}
		if p.Top != nil {
			pj.TopK, pj.Per, pj.By = p.Top.K, strings.TrimSpace(p.Top.Per), strings.TrimSpace(p.Top.By)
		}
		ps = append(ps, pj)
	}
	sigs := map[string]string{}
	for n, t := range set.Signals() {
		sigs[n] = t.String()
	}
	return printJSON(w, map[string]any{"file": path, "valid": true, "signals": sigs, "policies": ps})
}

func printPolicies(w io.Writer, path string, set *subsets.Set) error {
	ps := set.Policies()
	exported := 0
	for _, p := range ps {
		if p.Exported {
			exported++
		}
	}
	fmt.Fprintf(w, "%s: ok, %d policies (%d exported)\n", path, len(ps), exported)
	if sigs := set.Signals(); len(sigs) > 0 {
		names := make([]string, 0, len(sigs))
		for n, t := range sigs {
			names = append(names, n+" ("+t.String()+")")
		}
		sort.Strings(names)
		fmt.Fprintf(w, "signals: %s\n", strings.Join(names, ", "))
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tEXPORTED\tWHERE\tTOP\tHISTORY")
	for _, p := range ps {
		where := strings.Join(strings.Fields(p.Where), " ")
		if where == "" {
			where = "(every page)"
		}
		top := "-"
		if p.Top != nil {
			top = fmt.Sprintf("%d", p.Top.K)
			if per := strings.TrimSpace(p.Top.Per); per != "" {
				top += " per " + per
			}
			top += " by " + strings.TrimSpace(p.Top.By)
		}
		fmt.Fprintf(tw, "%s\t%v\t%s\t%s\t%d\n", p.Name, p.Exported, where, top, set.History(p.Name))
	}
	return tw.Flush()
}

func subsetsExplainCommand() *cli.Command {
	return &cli.Command{
		Name:  "explain",
		Usage: "say why one page is or is not in each subset, with its values",
		Description: `Reads the page's docs row and signals from the store, evaluates every policy of the file
at --as-of and prints, per policy, "member" (for a policy with top: "candidate", which
top-K may still drop), "no" or "unknown" (a value the predicate needs is missing),
with the parts of the predicate that decided and the page's values in brackets:

   fresh        no       age(fetched_at) < 30d [age(fetched_at) = 47d12h]
   high-value   unknown  score >= 0.8 [score = missing]

Examples:
   pillar subsets explain --store data/store --policies testdata/policies.yaml \
       --url https://www.postgresql.org/docs/15/sql-select.html
   pillar subsets explain --store data/store --policies testdata/policies.yaml \
       --key 1017679c3c0f532d2fcb25510a4f0224 --as-of 2026-12-31T00:00:00Z --json`,
		Flags: []cli.Flag{
			storeFlag,
			&cli.StringFlag{Name: "policies", Usage: "policy file (YAML or JSON)", Required: true, EnvVars: []string{"PILLAR_POLICIES"}},
			&cli.StringFlag{Name: "url", Usage: "the page's URL (normalized and hashed to its key)"},
			&cli.StringFlag{Name: "key", Usage: "the page key (32 hex characters), instead of --url"},
			&cli.TimestampFlag{Name: "as-of", Layout: time.RFC3339, Usage: "evaluation time for age() (default: now)"},
			&cli.BoolFlag{Name: "json", Usage: "print the verdicts as JSON"},
		},
		Action: func(c *cli.Context) error {
			set, err := subsets.ReadFile(c.String("policies"))
			if err != nil {
				return err
			}
			var key pillar.Key
			switch {
			case c.String("url") != "" && c.String("key") == "":
				if key, _, err = pillar.KeyOfURL(c.String("url")); err != nil {
					return fmt.Errorf("subsets explain: --url: %w", err)
				}
			case c.String("key") != "" && c.String("url") == "":
				if key, err = pillar.ParseKey(c.String("key")); err != nil {
					return fmt.Errorf("subsets explain: --key: %w", err)
				}
			default:
				return errors.New("subsets explain: give exactly one of --url and --key")
			}
			asOf := time.Now()
			if t := c.Timestamp("as-of"); t != nil {
				asOf = *t
			}
			sn, done, err := openSnapshot(c)
			if err != nil {
				return err
			}
			defer done()
			page, err := subsets.LoadPage(c.Context, sn, key.String())
			if err != nil {
				return err
			}
			verdicts := set.Explain(page, asOf)
			// The final answer for top-K candidates: did the last recompute
			// keep the page (cmd_subsets_final.go)?
			finals := map[string]topKFinal{}
			var exportedIn []string
			for _, v := range verdicts {
				if v.Result == "candidate" {
					f, err := finalTopK(c.Context, sn, v.Subset, page.Key)
					if err != nil {
						return err
					}
					finals[v.Subset] = f
				}
				if set.Exported(v.Subset) && (v.Result == "member" || finals[v.Subset].Final == "in") {
					exportedIn = append(exportedIn, v.Subset)
				}
			}
			if c.Bool("json") {
				type row struct {
					Subset   string `json:"subset"`
					Exported bool   `json:"exported"`
					Result   string `json:"result"`
					// Final is "in" or "out" after top-K ("not computed"
					// before the first recompute); the predicate's answer
					// otherwise ("unknown" when a value is missing).
					Final string     `json:"final"`
					Why   string     `json:"why"`
					TopK  *topKFinal `json:"top_k,omitempty"`
				}
				out := struct {
					PageKey    string    `json:"page_key"`
					URL        string    `json:"url"`
					AsOf       time.Time `json:"as_of"`
					Exported   bool      `json:"exported"`
					ExportedIn []string  `json:"exported_in"`
					Verdict    []row     `json:"verdicts"`
				}{PageKey: page.Key, URL: page.URL, AsOf: asOf.UTC(), Exported: len(exportedIn) > 0, ExportedIn: append([]string{}, exportedIn...)}
				for _, v := range verdicts {
					r := row{Subset: v.Subset, Exported: set.Exported(v.Subset), Result: v.Result, Why: v.Why}
					switch v.Result {
					case "member":
						r.Final = "in"
					case "no":
						r.Final = "out"
					case "candidate":
						f := finals[v.Subset]
						r.Final, r.TopK = f.Final, &f
					default:
						r.Final = v.Result
					}
					out.Verdict = append(out.Verdict, r)
				}
				return printJSON(c.App.Writer, out)
			}
			w := c.App.Writer
			fmt.Fprintf(w, "page %s %s, as of %s\n\n", page.Key, page.URL, asOf.UTC().Format(time.RFC3339))
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SUBSET\tEXPORTED\tRESULT\tWHY")
			var candidates []string
			for _, v := range verdicts {
				fmt.Fprintf(tw, "%s\t%v\t%s\t%s\n", v.Subset, set.Exported(v.Subset), v.Result, v.Why)
				if set.Exported(v.Subset) && v.Result == "candidate" {
					candidates = append(candidates, v.Subset)
				}
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			fmt.Fprintln(w)
			for _, s := range candidates {
				f := finals[s]
				switch f.Final {
				case "in":
					fmt.Fprintf(w, "%s: in after top-K (score %g; recompute generation %d as of %s kept %d pages)\n", s, f.Score, f.Generation, f.AsOf, f.Size)
				case "out":
					fmt.Fprintf(w, "%s: out after top-K (recompute generation %d as of %s kept %d pages with higher scores)\n", s, f.Generation, f.AsOf, f.Size)
				default:
					fmt.Fprintf(w, "%s: passes the predicate; top-K not computed yet (run pillar subsets recompute)\n", s)
				}
			}
			if len(exportedIn) > 0 {
				fmt.Fprintf(w, "exported: a member of %s\n", strings.Join(exportedIn, ", "))
			} else {
				fmt.Fprintln(w, "not exported: in no exported subset")
			}
			return nil
		},
	}
}

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

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

Examples:
   pillar subsets validate --policies testdata/policies.yaml`,
		Subcommands: append([]*cli.Command{
			subsetsValidateCommand(),
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
					enc := json.NewEncoder(c.App.Writer)
					enc.SetIndent("", "  ")
					enc.SetEscapeHTML(false)
					_ = enc.Encode(map[string]any{"file": path, "valid": false, "errors": list})
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
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(map[string]any{"file": path, "valid": true, "signals": sigs, "policies": ps})
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

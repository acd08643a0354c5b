// Package subsets implements subset policies: parsing and validating a
// policy file, evaluating its predicates over pages, top-K per group, the
// membership diff between generations, and the export decision per page.
//
// Everything here is a pure function of its inputs: evaluation takes the
// as-of time as a parameter and never reads the clock, top-K breaks ties by
// page key, so the same pages, signals, policies and as-of give the same
// memberships in any order on any machine. That is what makes a re-run of a
// recompute produce no new export work.
//
// # Policy file
//
// YAML (or JSON, which is YAML):
//
//	history: 3                 # generations kept per subset (default 3)
//	signals:                   # named signals from the signals table
//	  score: number            #   number or string
//	  category: string
//	policies:
//	  - name: fresh            # letters, digits, - and _; the table is subsets/<name>
//	    exported: true         # members are exported to the serving tier (default false)
//	    description: fetched in the last week
//	    where: 'age(fetched_at) < 7d and lang == "en"'
//	  - name: top-per-host
//	    exported: true
//	    where: score >= 0.5
//	    top: {k: 1000, per: host, by: score desc}
//	    history: 7             # overrides the file's history
//
// Validation reports every error it finds, each as file:line:col, the policy
// and the key at fault: unknown keys, wrong value kinds, duplicate policy
// names, an empty file, top.k below 1, syntax errors, unknown fields and
// signals, type mismatches (score > "high"), bad regular expressions.
//
// # Predicate language
//
// A where is a condition over one page; top.per is a string expression and
// top.by an ordering. The grammar, lowest precedence first:
//
//	expr     = and { "or" and }
//	and      = unary { "and" unary }
//	unary    = "not" unary | cmp
//	cmp      = operand [ cmpop operand
//	                   | ( "~" | "!~" ) string
//	                   | [ "not" ] "in" list ]
//	cmpop    = "==" | "!=" | "<" | "<=" | ">" | ">="
//	operand  = literal | name | call | "(" expr ")"
//	call     = ident "(" [ expr { "," expr } ] ")"
//	name     = ident | "signal" "." ident
//	list     = "[" [ literal { "," literal } [ "," ] ] "]"
//	literal  = [ "-" ] number | [ "-" ] duration | string | "true" | "false"
//	duration = number unit { number unit }      unit: ms s m h d w  (7d, 1h30m, 1.5h)
//	string   = `"` Go escapes `"` | "`" raw text "`"
//	order    = expr [ "asc" | "desc" ]            (top.by; desc is the default)
//
// Names are docs fields or declared signals. The fields, with their types:
//
//	key, url, host, title, lang               string
//	text_len, out_links, html_bytes           number
//	fetched_at, updated_at                    time (unknown when 0)
//
// A bare name that is not a field is a declared signal; signal.<name> names
// a signal even when a field has the same name. Functions:
//
//	age(time) duration    as-of minus the time: age(fetched_at) < 7d
//	has(name) condition   whether the page has the field or signal
//	time(string) time     a constant: fetched_at > time("2026-01-31")
//
// Types are checked at validation: comparisons need two values of one type
// (number, string, time or duration; strings compare byte-wise), ~ and !~
// take a string and a regular expression literal (RE2, unanchored), in takes
// a list of literals of the left side's type, and/or/not take conditions.
//
// Missing values. A page may lack a signal (or have one of the other type,
// or NaN, which read as missing). A comparison with a missing value is
// unknown, and logic is three-valued as in SQL: not unknown is unknown,
// false and unknown is false, true or unknown is true. A page is a member
// only if its where is true. has(x) is never unknown.
//
// # Evaluation, top-K and diff in MapReduce
//
// A recompute maps each page (NewPage from its docs row and signals) through
// Set.Eval at the run's as-of, which returns one Match per satisfied policy.
// Matches of policies without top are members as they are (score 1).
// Matches of policies with top are reduced per (subset, group): push them
// into Set.NewTopK's TopK and write TopK.Members. Members without a value
// for top.by rank after all others; ties go to the smaller page key.
//
// Each new generation is sorted by page key and joined with the previous one
// by Diff or DiffSeq (enter, leave, stay). Per page, ExportDecision turns the
// exported subsets it was and is in, and whether its record changed, into
// put, delete or nothing; a page that leaves one exported subset but stays
// in another is not deleted. Prune picks the generations to drop, and
// Generation is the record to keep with each one (its exported flag above
// all: members of a policy that stops being exported must be deleted).
//
// Set.Plan runs the whole recompute in memory (Eval, top-K, Diff,
// ExportDecision): the reference the MapReduce job must agree with, and
// enough for small corpora.
//
// A member's reason names the parts of its predicate that held
// ("lang == "en" and url ~ "/docs/""; for or, the first branch that held),
// and for top-K its rank. Set.Explain says, for every policy, why a page is
// or is not a member, with the page's values:
//
//	fresh: no: age(fetched_at) < 30d [age(fetched_at) = 47d12h]
//	high-value: unknown: score >= 0.8 [score = missing]
//
// Positions in errors are exact for plain, single-quoted and block (| and >)
// YAML scalars; escapes in double-quoted scalars may shift a column.
//
// # Concurrency
//
// A Set is immutable once built: Eval, NewTopK, Members and the accessors
// may be called from any number of goroutines. A TopK belongs to one
// goroutine. Diff, DiffSeq, ExportDecision and Prune are pure functions.
package subsets

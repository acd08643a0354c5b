package chunker

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the golden files under testdata/ with the actual output")

func init() { flag.BoolVar(rewrite, "update", false, "same as -rewrite") }

// A golden file is a list of cases:
//
//	# comment
//	<command> <args>
//	<input: any lines, blank ones included>
//	----
//	<expected output, ended by a blank line or the end of the file>
//
// Commands:
//
//	tokenize               the tokens of the input, one per line
//	chunk <spec> [file=F]  the chunks of the input (or of testdata/F)
//	parse <spec>           the chunker's id and canonical spec, or the error
type goldenCase struct {
	cmd, input, want string
	line             int
}

func readGolden(t *testing.T, path string) []goldenCase {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	var cases []goldenCase
	var cur *goldenCase
	state := 0 // 0 between cases, 1 input, 2 output
	var in, out []string
	lineNo := 0
	for sc.Scan() {
		lineNo++
		l := sc.Text()
		switch state {
		case 0:
			if l == "" || strings.HasPrefix(l, "#") {
				continue
			}
			cases = append(cases, goldenCase{cmd: l, line: lineNo})
			cur = &cases[len(cases)-1]
			in, out, state = nil, nil, 1
		case 1:
			if l == "----" {
				cur.input = strings.Join(in, "\n")
				state = 2
				continue
			}
			in = append(in, l)
		case 2:
			if l == "" {
				cur.want = strings.Join(out, "\n")
				state = 0
				continue
			}
			out = append(out, l)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	switch state {
	case 1:
		t.Fatalf("%s:%d: case has no ---- line", path, cur.line)
	case 2:
		cur.want = strings.Join(out, "\n")
	}
	return cases
}

func writeGolden(t *testing.T, path string, cases []goldenCase) {
	t.Helper()
	// Keep the comments and layout: rebuild the file from the originals,
	// replacing each case's output.
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	var b strings.Builder
	ci := 0
	state := 0
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		switch state {
		case 0:
			b.WriteString(l + "\n")
			if l != "" && !strings.HasPrefix(l, "#") {
				state = 1
			}
		case 1:
			b.WriteString(l + "\n")
			if l == "----" {
				b.WriteString(cases[ci].want + "\n")
				ci++
				state = 2
			}
		case 2:
			if l == "" {
				b.WriteString("\n")
				state = 0
			}
		}
	}
	s := strings.TrimRight(b.String(), "\n") + "\n"
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func runGolden(t *testing.T, name string, run func(t *testing.T, c goldenCase) string) {
	path := filepath.Join("testdata", name)
	cases := readGolden(t, path)
	for i := range cases {
		c := &cases[i]
		got := strings.TrimRight(run(t, *c), "\n")
		if *rewrite {
			c.want = got
			continue
		}
		if got != c.want {
			t.Errorf("%s:%d: %s\n--- got\n%s\n--- want\n%s", path, c.line, c.cmd, got, c.want)
		}
	}
	if *rewrite {
		writeGolden(t, path, cases)
	}
}

func TestGoldenTokenize(t *testing.T) {
	runGolden(t, "tokenize", func(t *testing.T, c goldenCase) string {
		var b strings.Builder
		toks := Tokenize(c.input)
		if n := CountTokens(c.input); n != len(toks) {
			t.Errorf("line %d: CountTokens = %d, Tokenize has %d", c.line, n, len(toks))
		}
		for _, s := range toks {
			fmt.Fprintf(&b, "[%d,%d) %s %q\n", s.Start, s.End, s.Kind, c.input[s.Start:s.End])
		}
		return b.String()
	})
}

func TestGoldenChunk(t *testing.T) {
	for _, name := range []string{"tokens", "recursive", "parse"} {
		t.Run(name, func(t *testing.T) {
			runGolden(t, name, func(t *testing.T, c goldenCase) string {
				f := strings.Fields(c.cmd)
				if len(f) < 2 {
					t.Fatalf("line %d: want <command> <spec>", c.line)
				}
				ch, err := Parse(f[1])
				if f[0] == "parse" {
					if err != nil {
						return "error: " + err.Error()
					}
					return ch.ID() + "\n" + ch.Spec()
				}
				if err != nil {
					t.Fatalf("line %d: %v", c.line, err)
				}
				text := c.input
				if len(f) > 2 {
					file, ok := strings.CutPrefix(f[2], "file=")
					if !ok {
						t.Fatalf("line %d: want file=NAME, got %q", c.line, f[2])
					}
					data, err := os.ReadFile(filepath.Join("testdata", file))
					if err != nil {
						t.Fatal(err)
					}
					text = string(data)
				}
				chunks := ch.Chunk(text)
				checkChunks(t, ch, text, chunks)
				var b strings.Builder
				fmt.Fprintf(&b, "id %s, %d chunks\n", ch.ID(), len(chunks))
				for i, k := range chunks {
					fmt.Fprintf(&b, "#%d [%d,%d) %dt %q\n", i, k.Start, k.End, k.Tokens, k.Text)
				}
				return b.String()
			})
		})
	}
}

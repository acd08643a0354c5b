package subsets

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Sentinel errors.
var (
	// ErrInvalid: a policy file or policy failed validation. Every *Error and
	// every ErrorList wraps it.
	ErrInvalid = errors.New("invalid policy")
	// ErrUnsorted: Diff was given members out of page-key order or with a
	// repeated key.
	ErrUnsorted = errors.New("members not strictly sorted by page key")
	// ErrDuplicateSignal: NewPage was given two signals of one name.
	ErrDuplicateSignal = errors.New("duplicate signal")
	// ErrUnknownSubset: a subset name that the Set does not define.
	ErrUnknownSubset = errors.New("unknown subset")
)

// Error is one validation error, at a position of the policy file.
type Error struct {
	File   string `json:"file"`             // as given to Parse; "" for policies built in code
	Line   int    `json:"line"`             // 1-based; 0 if unknown
	Col    int    `json:"col"`              // 1-based, in characters; 0 if unknown
	Policy string `json:"policy,omitempty"` // the policy at fault; "" for file-level errors
	Field  string `json:"field,omitempty"`  // the key at fault ("where", "top.k", ...); "" if none
	Msg    string `json:"message"`
}

func (e *Error) Error() string {
	var b strings.Builder
	loc := e.File
	if e.Line > 0 {
		if loc == "" && e.Field != "" {
			loc = e.Field // policies built in code: position inside the field
		}
		loc += fmt.Sprintf(":%d", e.Line)
		if e.Col > 0 {
			loc += fmt.Sprintf(":%d", e.Col)
		}
	}
	if loc != "" {
		b.WriteString(loc)
		b.WriteString(": ")
	}
	if e.Policy != "" {
		fmt.Fprintf(&b, "policy %q: ", e.Policy)
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap makes errors.Is(err, ErrInvalid) hold.
func (e *Error) Unwrap() error { return ErrInvalid }

// ErrorList is every validation error of one policy file, in file order.
type ErrorList []*Error

func (l ErrorList) Error() string {
	if len(l) == 1 {
		return "subsets: " + l[0].Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "subsets: %d errors:", len(l))
	for _, e := range l {
		b.WriteString("\n\t")
		b.WriteString(e.Error())
	}
	return b.String()
}

// Unwrap returns the errors of the list (so errors.Is finds ErrInvalid).
func (l ErrorList) Unwrap() []error {
	out := make([]error, len(l))
	for i, e := range l {
		out[i] = e
	}
	return out
}

// errs collects validation errors.
type errs struct {
	file string
	list ErrorList
	// inFile: positions are file positions, so the list sorts by them.
	// Policies built in code keep policy order.
	inFile bool
}

func (c *errs) add(e *Error) {
	e.File = c.file
	c.list = append(c.list, e)
}

// err returns the sorted list, or nil if there are no errors.
func (c *errs) err() error {
	if len(c.list) == 0 {
		return nil
	}
	if !c.inFile {
		return c.list
	}
	sort.SliceStable(c.list, func(i, j int) bool {
		a, b := c.list[i], c.list[j]
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Col < b.Col
	})
	return c.list
}

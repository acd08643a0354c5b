// Command pillar is the toolkit's CLI: every capability of the write and
// serve path is reachable from here. The commands and their flags live in
// package cli, which maps flags to the options of the packages that own the
// work; see its doc.go.
package main

import "github.com/pillarkit/pillar/cli"

func main() { cli.Main() }

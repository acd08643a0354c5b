// Package progress shows the progress of long work: a bar on a terminal
// (schollz/progressbar), plain periodic log lines otherwise (CI, pipes).
//
// A Bar is safe for concurrent Add calls.
package progress

// Package cli is the wiring of the pillar command (cmd/pillar only calls
// Main): every capability of the write and serve path is reachable from here. Each component adds its commands in its
// own cmd_<component>.go file and one line to commands() below.
package cli

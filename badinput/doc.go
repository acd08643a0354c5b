// Package badinput holds no code: its test is the one table of every bad
// input the Pillar components reject, each with the error it gets (a
// sentinel where the component exports one, else the words the message must
// contain). A new rejection in any component belongs in this table.
package badinput

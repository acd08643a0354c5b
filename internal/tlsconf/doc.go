// Package tlsconf builds the TLS configurations of Pillar's servers and
// clients from PEM files, reloads them without a restart, and makes a
// local certificate authority for tests and the demo (DevCerts).
//
// Invariants:
//   - A Reloader always serves the last certificate pair that loaded and
//     parsed in full. A reload that fails (a half-written file, a key that
//     does not match its certificate, a CA file with no certificate) keeps
//     the previous material, is reported through Options.OnError, and is
//     tried again at the next signal or file change.
//   - Reloads happen on SIGHUP (Watch) and when a file's size or
//     modification time changes (polled every Options.Poll); connections
//     already established keep the certificate they were made with, new
//     handshakes use the new one.
//   - A server given a client CA requires and verifies a client
//     certificate (mutual TLS), or with Options.ClientCertOptional
//     verifies one when sent; without a client CA it accepts any client.
//   - TLS 1.2 is the minimum version.
//   - OffLoopback refuses a listener bound beyond the loopback interface
//     without TLS unless insecure is set: a plaintext port on a network
//     is an explicit choice, never a default.
package tlsconf

// Package grpclink holds the connection settings every Pillar gRPC client
// and server shares so that a link which goes silent (a partition, a peer
// that vanished, a black-holed route) is noticed in seconds rather than
// after TCP's retransmission timeout (up to 15 minutes on Linux).
//
// # Invariants
//
//   - A client pings an idle or busy connection after ClientPingEvery
//     without traffic and closes it when the ping is not answered within
//     PingTimeout; its calls then fail with Unavailable and the next call
//     dials again.
//   - A client redials with exponential backoff capped at RedialMax, so it
//     is back within a few seconds of a heal (gRPC's own cap is 120 s).
//   - A server accepts client pings as often as every ServerMinPing
//     (below ClientPingEvery: a client keeping these settings is never sent
//     GOAWAY "too_many_pings"), and pings a silent client itself after
//     ServerPingEvery, closing the connection if it does not answer.
package grpclink

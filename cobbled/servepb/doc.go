// Package servepb is the wire API of a cobbled serving node: the Serve
// service with its single BatchGet method. Clients (the router, `pillar get`)
// use the generated client; the node answers with a hand-encoded response
// that is byte-for-byte a BatchGetResponse (see package cobbled).
package servepb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative serve.proto

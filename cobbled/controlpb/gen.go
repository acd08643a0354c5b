// Package controlpb holds the control plane's generated gRPC and protobuf
// code. Regenerate with `go generate ./cobbled/controlpb` (needs protoc,
// protoc-gen-go and protoc-gen-go-grpc on PATH).
package controlpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative control.proto

"""Generated protobuf and gRPC stubs (gen-stubs.sh); do not edit."""

#!/bin/sh
# Regenerates the Python client's protobuf and gRPC stubs from the .proto
# files (cobbled/servepb/serve.proto, internal/record/record.proto) into
# clients/python/pillar_client/_gen/, or into the directory given as the
# first argument (the staleness test regenerates into a temporary
# directory and compares with the committed files).
#
# Needs protoc and grpc_python_plugin (Debian: protobuf-compiler,
# protobuf-compiler-grpc; make deps installs them). The generated modules'
# absolute imports ("import serve_pb2") are rewritten to relative ones so
# they work inside the pillar_client package.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-$here/pillar_client/_gen}
plugin=${GRPC_PYTHON_PLUGIN:-$(command -v grpc_python_plugin || echo /usr/bin/grpc_python_plugin)}

if ! command -v protoc >/dev/null 2>&1; then
	echo "gen-stubs.sh: protoc not found (apt-get install protobuf-compiler)" >&2
	exit 1
fi
if [ ! -x "$plugin" ]; then
	echo "gen-stubs.sh: grpc_python_plugin not found at $plugin (apt-get install protobuf-compiler-grpc)" >&2
	exit 1
fi

mkdir -p "$out"
protoc -I "$root/cobbled/servepb" \
	--python_out="$out" --grpc_python_out="$out" \
	--plugin=protoc-gen-grpc_python="$plugin" \
	serve.proto
protoc -I "$root/internal/record" --python_out="$out" record.proto

# Absolute imports of sibling stubs -> relative.
for f in "$out"/*_pb2*.py; do
	sed -e 's/^import \([a-z_0-9]*_pb2\) as /from . import \1 as /' "$f" >"$f.tmp"
	mv "$f.tmp" "$f"
done
[ -f "$out/__init__.py" ] || printf '"""Generated protobuf and gRPC stubs (gen-stubs.sh); do not edit."""\n' >"$out/__init__.py"

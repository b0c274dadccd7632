#!/usr/bin/env bash
# Generates TypeScript for proto/**/*.proto into proto/gen with ts-proto.
#   scripts/proto.sh          regenerate proto/gen
#   scripts/proto.sh --check  fail when proto/gen is not what the .proto files generate
set -euo pipefail
cd "$(dirname "$0")/.."
command -v protoc >/dev/null || { echo "protoc is missing: apt-get install protobuf-compiler" >&2; exit 1; }
out=proto/gen
[ "${1:-}" = "--check" ] && out=$(mktemp -d)
rm -rf "${out:?}"/tributary
mkdir -p "$out"
protoc \
  --plugin=protoc-gen-ts_proto=node_modules/.bin/protoc-gen-ts_proto \
  --ts_proto_out="$out" \
  --ts_proto_opt=esModuleInterop=true,importSuffix=.js,forceLong=number,outputServices=grpc-js,oneof=unions-value,outputJsonMethods=false,outputPartialMethods=true,useExactTypes=false \
  -I proto $(find proto/tributary -name '*.proto' | sort)
if [ "${1:-}" = "--check" ]; then
  if ! diff -r "$out" proto/gen >/dev/null; then
    diff -r "$out" proto/gen | head -40 >&2
    echo "proto/gen is stale: run npm run proto and commit the result" >&2
    exit 1
  fi
  rm -rf "$out"
  echo "proto/gen is current"
fi

// Package wire holds every binary layout velo puts on a connection or in a peer-info file: the
// TCP transport's hello and address, the UCX transport's address blob, frame header, frame seal
// and hello body, the messenger frame, handles, peer info, the rendezvous protocol messages, the
// RDMA offer and descriptor, the drain notice, the multi-rail transport's rail-set key, the push
// protocol's grant handle and messages, and the same-host path's CUDA IPC and file frames. (The
// layouts outside it belong to module ucx, which cannot import it: UCX's sealed remote key,
// ucx/rkey.go, which travels inside the descriptor as opaque bytes, and the guarded GET and PUT
// headers, ucx/guardwire.go, paired with their C side.)
//
// Why one package: every decoder here reads bytes that a remote process (or a file) chose, so each
// one is written the same defensive way — lengths checked before every read (most through a
// bounds-checked cursor), never a panic, the first problem reported as an error wrapping
// ErrMalformed, trailing garbage refused — and each has a fuzz target whose seed corpus runs as an
// ordinary test. Keeping them together keeps that discipline in
// one place and keeps the layouts easy to review side by side.
//
// All integers are big-endian. Variable-length fields carry an explicit length before their bytes;
// decoders return slices that alias the input (no copies), so callers that keep them must own the
// input buffer.
package wire

import "errors"

// ErrMalformed is wrapped by every decode error: truncated input, a length that overruns the input,
// an unknown kind or version, or trailing bytes.
var ErrMalformed = errors.New("malformed wire data")

// ErrVersion is wrapped (together with ErrMalformed) when the bytes carry a version this build does
// not speak. Upgrading both sides to the same velo release is the fix.
var ErrVersion = errors.New("unsupported wire version")

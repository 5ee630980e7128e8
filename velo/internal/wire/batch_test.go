package wire

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func FuzzDecodeAcquireBatchRequest(f *testing.F) {
	offer, _ := AppendOffer(nil, Offer{Backend: "ucx", Blob: []byte{2}})
	for _, a := range []AcquireBatchRequest{
		{Handles: []Handle{{Owner: 1, Slot: 2, Nonce: 3, Size: 4}}},
		{Offer: offer, Handles: []Handle{{Owner: 1, Slot: 2, Nonce: 3, Size: 4}, {Owner: 1, Slot: 5, Nonce: 6, Size: 1 << 20}}},
		{Offer: offer, InlineMax: 4096, Handles: []Handle{{Owner: 1, Slot: 2, Nonce: 3, Size: 4}}},
	} {
		b, _ := AppendAcquireBatchRequest(nil, a)
		f.Add(b)
	}
	f.Fuzz(fuzzFixed(DecodeAcquireBatchRequest, func(a AcquireBatchRequest) ([]byte, error) { return AppendAcquireBatchRequest(nil, a) }))
}

func FuzzDecodeAcquireBatchResponse(f *testing.F) {
	for _, es := range [][]AcquireBatchEntry{
		{{Response: AcquireResponse{Path: "chunked", Reason: "not_configured", Lease: 1, TTLMillis: 30000, Size: 10, ChunkSize: 1 << 20}}},
		{
			{Response: AcquireResponse{Path: "rdma", Reason: "ok", Lease: 2, TTLMillis: 1, Size: 4096, ChunkSize: 1, Descriptor: []byte("desc")}},
			{EntryError: EntryError{ErrKind: "rendezvous.released", ErrText: "slot 7 released"}},
		},
		{
			{Response: AcquireResponse{Path: "inline", Reason: "ok", Lease: 3, TTLMillis: 1, Size: 5, ChunkSize: 1}, Inline: []byte("hello")},
			{Response: AcquireResponse{Path: "inline", Reason: "ok", Lease: 4, TTLMillis: 1, Size: 0, ChunkSize: 1}, Inline: []byte{}},
			{Response: AcquireResponse{Path: "rdma", Reason: "ok", Lease: 5, TTLMillis: 1, Size: 4096, ChunkSize: 1, Descriptor: []byte("d")}},
		},
	} {
		b, _ := AppendAcquireBatchResponse(nil, es)
		f.Add(b)
	}
	f.Fuzz(fuzzFixed(DecodeAcquireBatchResponse, func(es []AcquireBatchEntry) ([]byte, error) { return AppendAcquireBatchResponse(nil, es) }))
}

func TestAcquireBatchLimits(t *testing.T) {
	_, err := AppendAcquireBatchRequest(nil, AcquireBatchRequest{})
	assert.ErrorIs(t, err, ErrMalformed, "an empty batch")
	_, err = AppendAcquireBatchRequest(nil, AcquireBatchRequest{Handles: make([]Handle, MaxAcquireBatch+1)})
	assert.ErrorIs(t, err, ErrMalformed, "a batch above the limit")

	b, err := AppendAcquireBatchRequest(nil, AcquireBatchRequest{Handles: []Handle{{Owner: 1, Slot: 1, Nonce: 1, Size: 1}}})
	require.NoError(t, err)
	b[0] = AcquireBatchInlineVersion + 1
	_, err = DecodeAcquireBatchRequest(b)
	assert.ErrorIs(t, err, ErrVersion)

	// A count that claims more handles than the bytes hold is refused before anything is
	// allocated for them.
	huge := []byte{AcquireBatchVersion, 0, 0, 0x0f, 0xff}
	_, err = DecodeAcquireBatchRequest(huge)
	assert.ErrorIs(t, err, ErrMalformed)

	// The inline request: its own version, a limit of 1 to MaxInlinePayload, zero only as version 1.
	b, err = AppendAcquireBatchRequest(nil, AcquireBatchRequest{InlineMax: 4096, Handles: []Handle{{Owner: 1, Slot: 1, Nonce: 1, Size: 1}}})
	require.NoError(t, err)
	assert.EqualValues(t, AcquireBatchInlineVersion, b[0])
	a, err := DecodeAcquireBatchRequest(b)
	require.NoError(t, err)
	assert.EqualValues(t, 4096, a.InlineMax)
	_, err = AppendAcquireBatchRequest(nil, AcquireBatchRequest{InlineMax: MaxInlinePayload + 1, Handles: []Handle{{Owner: 1, Slot: 1, Nonce: 1, Size: 1}}})
	assert.ErrorIs(t, err, ErrMalformed, "an inline limit above the bound")
	for _, limit := range []uint32{0, MaxInlinePayload + 1} {
		bad := append([]byte{AcquireBatchInlineVersion, 0, 0}, byte(limit>>24), byte(limit>>16), byte(limit>>8), byte(limit))
		bad = append(bad, b[len(b)-2-HandleLen:]...)
		_, err = DecodeAcquireBatchRequest(bad)
		assert.ErrorIs(t, err, ErrMalformed, "inline limit %d", limit)
	}

	// An inline entry must be the whole payload, within the bound, without a descriptor.
	lease := AcquireResponse{Path: "inline", Reason: "ok", Lease: 1, TTLMillis: 1, Size: 4, ChunkSize: 1}
	_, err = AppendAcquireBatchResponse(nil, []AcquireBatchEntry{{Response: lease, Inline: []byte("abc")}})
	assert.ErrorIs(t, err, ErrMalformed, "three bytes for a four-byte lease")
	withDesc := lease
	withDesc.Descriptor = []byte("d")
	_, err = AppendAcquireBatchResponse(nil, []AcquireBatchEntry{{Response: withDesc, Inline: []byte("abcd")}})
	assert.ErrorIs(t, err, ErrMalformed, "a descriptor beside the bytes")
	good, err := AppendAcquireBatchResponse(nil, []AcquireBatchEntry{{Response: lease, Inline: []byte("abcd")}})
	require.NoError(t, err)
	es, err := DecodeAcquireBatchResponse(good)
	require.NoError(t, err)
	assert.Equal(t, []byte("abcd"), es[0].Inline)
	for cut := 1; cut <= 4; cut++ {
		_, err = DecodeAcquireBatchResponse(good[:len(good)-cut])
		assert.ErrorIs(t, err, ErrMalformed, "an answer %d bytes short", cut)
	}
	lying := append([]byte(nil), good...)
	lying[len(lying)-5] = 3 // the length says 3 bytes for a 4-byte lease
	_, err = DecodeAcquireBatchResponse(lying[:len(lying)-1])
	assert.ErrorIs(t, err, ErrMalformed, "an inline length that is not the lease's size")

	// An answer entry that is neither a lease nor an error.
	_, err = DecodeAcquireBatchResponse([]byte{AcquireBatchVersion, 0, 1, 1, 0, 0, 0})
	assert.ErrorIs(t, err, ErrMalformed)
	_, err = DecodeAcquireBatchResponse([]byte{AcquireBatchVersion, 0, 1, 7})
	assert.ErrorIs(t, err, ErrMalformed)
}

func FuzzDecodeEndBatchRequest(f *testing.F) {
	for _, a := range []EndBatchRequest{
		{Leases: []uint64{1}},
		{Release: true, Leases: []uint64{1, 2, 1 << 40}},
	} {
		b, _ := AppendEndBatchRequest(nil, a)
		f.Add(b)
	}
	f.Fuzz(fuzzFixed(DecodeEndBatchRequest, func(a EndBatchRequest) ([]byte, error) { return AppendEndBatchRequest(nil, a) }))
}

func FuzzDecodeEndBatchResponse(f *testing.F) {
	for _, es := range [][]EndBatchEntry{
		{{}},
		{{}, {ErrKind: "rendezvous.bad_lease", ErrText: "lease 9 is not open"}, {ErrText: "no kind"}},
	} {
		b, _ := AppendEndBatchResponse(nil, es)
		f.Add(b)
	}
	f.Fuzz(fuzzFixed(DecodeEndBatchResponse, func(es []EndBatchEntry) ([]byte, error) { return AppendEndBatchResponse(nil, es) }))
}

func TestEndBatchLimits(t *testing.T) {
	_, err := AppendEndBatchRequest(nil, EndBatchRequest{})
	assert.ErrorIs(t, err, ErrMalformed, "an empty batch")
	_, err = AppendEndBatchRequest(nil, EndBatchRequest{Leases: make([]uint64, MaxEndBatch+1)})
	assert.ErrorIs(t, err, ErrMalformed, "a batch above the limit")

	b, err := AppendEndBatchRequest(nil, EndBatchRequest{Release: true, Leases: []uint64{7}})
	require.NoError(t, err)
	got, err := DecodeEndBatchRequest(b)
	require.NoError(t, err)
	assert.Equal(t, EndBatchRequest{Release: true, Leases: []uint64{7}}, got)
	b[1] = 2
	_, err = DecodeEndBatchRequest(b)
	assert.ErrorIs(t, err, ErrMalformed, "a mode that is neither detach nor release")
	b[0], b[1] = EndBatchVersion+1, 1
	_, err = DecodeEndBatchRequest(b)
	assert.ErrorIs(t, err, ErrVersion)

	// A count that claims more leases (or entries) than the bytes hold is refused before
	// anything is allocated for them.
	_, err = DecodeEndBatchRequest([]byte{EndBatchVersion, 0, 0x0f, 0xff, 0, 0, 0, 0, 0, 0, 0, 1})
	assert.ErrorIs(t, err, ErrMalformed)
	_, err = DecodeEndBatchResponse([]byte{EndBatchVersion, 0x0f, 0xff, 0})
	assert.ErrorIs(t, err, ErrMalformed)
	// An error entry with neither kind nor text, and an unknown tag.
	_, err = DecodeEndBatchResponse([]byte{EndBatchVersion, 0, 1, 1, 0, 0, 0})
	assert.ErrorIs(t, err, ErrMalformed)
	_, err = DecodeEndBatchResponse([]byte{EndBatchVersion, 0, 1, 7})
	assert.ErrorIs(t, err, ErrMalformed)
}

// TestUCXBlobVectoredFlags: the vectored GET and PUT flags round-trip each on its own, and an
// address of an earlier release (a bit clear) says its engine does not answer that request.
func TestUCXBlobVectoredFlags(t *testing.T) {
	for _, getv := range []bool{true, false} {
		for _, putv := range []bool{true, false} {
			b := AppendUCXBlob(nil, UCXBlob{RMA: true, VectoredGet: getv, VectoredPut: putv, MaxFrame: 1 << 20, Incarnation: 7, Worker: []byte("worker")})
			got, err := DecodeUCXBlob(b)
			require.NoError(t, err)
			assert.Equal(t, getv, got.VectoredGet)
			assert.Equal(t, putv, got.VectoredPut)
			assert.True(t, got.RMA)
		}
	}
}

// TestUCXBlobBuild: the UCX build a blob names round-trips, and Meets pairs builds of one
// major.minor release and one guard only.
func TestUCXBlobBuild(t *testing.T) {
	guarded := UCXBuild{Major: 1, Minor: 22, Patch: 0, Guard: "velo-ucx-guard/2"}
	stock := UCXBuild{Major: 1, Minor: 13, Patch: 1}
	for _, build := range []UCXBuild{guarded, stock} {
		b := AppendUCXBlob(nil, UCXBlob{RMA: true, MaxFrame: 1 << 20, Incarnation: 7, Build: build, Worker: []byte("worker")})
		got, err := DecodeUCXBlob(b)
		require.NoError(t, err)
		assert.Equal(t, build, got.Build)
		assert.Equal(t, []byte("worker"), got.Worker)
	}
	assert.Equal(t, "1.22.0 with velo-ucx-guard/2", guarded.String())
	assert.Equal(t, "1.13.1 (stock)", stock.String())

	assert.True(t, guarded.Meets(UCXBuild{Major: 1, Minor: 22, Patch: 3, Guard: "velo-ucx-guard/2"}), "a patch release keeps the wire")
	assert.False(t, guarded.Meets(stock), "another minor release")
	assert.False(t, guarded.Meets(UCXBuild{Major: 1, Minor: 22, Guard: ""}), "the same release without the guard")
	assert.False(t, guarded.Meets(UCXBuild{Major: 1, Minor: 22, Guard: "velo-ucx-guard/3"}), "another guard version")

	// A guard version that is not printable ASCII, or runs past the blob, is refused.
	b := AppendUCXBlob(nil, UCXBlob{MaxFrame: 1024, Incarnation: 1, Build: UCXBuild{Guard: "g"}, Worker: []byte{9}})
	bad := append([]byte(nil), b...)
	bad[20] = 0x07
	_, err := DecodeUCXBlob(bad)
	assert.ErrorIs(t, err, ErrMalformed)
	bad = append([]byte(nil), b...)
	bad[19] = MaxUCXGuardVersion + 1
	_, err = DecodeUCXBlob(bad)
	assert.ErrorIs(t, err, ErrMalformed)
}

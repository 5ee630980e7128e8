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
	b[0] = AcquireBatchVersion + 1
	_, err = DecodeAcquireBatchRequest(b)
	assert.ErrorIs(t, err, ErrVersion)

	// A count that claims more handles than the bytes hold is refused before anything is
	// allocated for them.
	huge := []byte{AcquireBatchVersion, 0, 0, 0x0f, 0xff}
	_, err = DecodeAcquireBatchRequest(huge)
	assert.ErrorIs(t, err, ErrMalformed)

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

package messenger

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/internal/wire"
)

// Kinds round trips run end to end in package velo's tests (rendezvous and push errors over real
// sockets); these pin the words and the matches of each way an error is said.
func TestKindsSayAnErrorOnce(t *testing.T) {
	errGone := errors.New("slot gone")
	errEmpty := errors.New("empty put")
	k := NewKinds("pkg",
		Kind{Name: "pkg.gone", Sentinel: errGone, Fix: "stage it again"},
		Kind{Sentinel: errEmpty}, // never crosses the wire
	)

	// The answering side tags what matches a sentinel that crosses the wire, and nothing else.
	tagged := k.Tag(fmt.Errorf("slot 3: %w", errGone))
	assert.Equal(t, "pkg.gone", errorKind(tagged))
	assert.ErrorIs(t, tagged, errGone)
	assert.Empty(t, errorKind(k.Tag(errEmpty)), "a local-only sentinel got a kind")
	plain := errors.New("other")
	assert.Same(t, plain, k.Tag(plain))

	// The asking side: the answer as the messenger delivers it (deliver.go's handlerFailure).
	answer := &RemoteError{Peer: 7, Handler: "pkg.get", Code: wire.CodeHandlerError, Kind: errorKind(tagged), Text: tagged.Error()}
	for _, said := range []error{k.Remote("get", answer), k.Said("get", fmt.Errorf("call: %w", answer))} {
		assert.EqualError(t, said, "pkg: get: slot 3: slot gone (stage it again)")
		assert.ErrorIs(t, said, errGone)
		assert.ErrorIs(t, said, ErrHandlerFailed)
		var re *RemoteError
		require.ErrorAs(t, said, &re)
		assert.EqualValues(t, 7, re.Peer)
	}

	// An answer of a kind the table does not know keeps the messenger's text.
	unknown := &RemoteError{Peer: 7, Handler: "pkg.get", Code: wire.CodeHandlerError, Kind: "pkg.new", Text: "news"}
	said := k.Remote("get", unknown)
	assert.EqualError(t, said, `pkg: get: peer 0000000000000007, handler "pkg.get": remote handler failed: news`)
	assert.NotErrorIs(t, said, errGone)

	// This instance's own errors: said in their words when they match a sentinel, wrapped if not.
	assert.EqualError(t, k.Said("put", fmt.Errorf("0 bytes: %w", errEmpty)), "pkg: put: 0 bytes: empty put")
	assert.ErrorIs(t, k.Said("put", errEmpty), errEmpty)
	assert.EqualError(t, k.Said("put", plain), "pkg: put: other")
	assert.ErrorIs(t, k.Said("put", plain), plain)
	assert.NoError(t, k.Said("put", nil))

	// One entry of a batch answer: a kind and a text.
	entry := k.Entry("get of entry 2", "pkg.gone", "slot 9 gone")
	assert.EqualError(t, entry, "pkg: get of entry 2: slot 9 gone (stage it again)")
	assert.ErrorIs(t, entry, errGone)
	assert.EqualError(t, k.Entry("get of entry 2", "pkg.error", "disk on fire"), "pkg: get of entry 2: disk on fire")
	name, ok := k.KindOf(errEmpty)
	assert.False(t, ok, "kind %q", name)
}

package ucxtransport

import (
	"errors"
	"fmt"

	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/transport"
)

// The byte layouts of this transport (address blob, frame header, hello body) live in
// velo/internal/wire with every other layout velo writes; this file is the transport's view of
// them: its instance IDs, its limits, and the errors AddPeer and the receiver act on.

// BlobVersion is the UCX wire version this build speaks (wire.UCXBlobVersion).
const BlobVersion = wire.UCXBlobVersion

// errBlobVersion is wrapped by decodeBlob when the version byte is not BlobVersion; AddPeer
// logs the rejection line for it.
var errBlobVersion = errors.New("unsupported ucx blob version")

// peerBlob is a decoded address blob.
type peerBlob = wire.UCXBlob

func appendBlob(dst []byte, b peerBlob) []byte { return wire.AppendUCXBlob(dst, b) }

// decodeBlob checks and decodes an address blob. Every error wraps transport.ErrInvalidEndpoint;
// a blob of another version also wraps errBlobVersion and says which version it carries.
func decodeBlob(b []byte) (peerBlob, error) {
	p, err := wire.DecodeUCXBlob(b)
	switch {
	case errors.Is(err, wire.ErrVersion):
		return p, fmt.Errorf("ucx: %w: %w %d (expected %d): upgrade all UCX peers together",
			transport.ErrInvalidEndpoint, errBlobVersion, p.Version, BlobVersion)
	case err != nil:
		return peerBlob{}, fmt.Errorf("ucx: %w: %w", transport.ErrInvalidEndpoint, err)
	case p.MaxFrame < MinEagerMax:
		return peerBlob{}, fmt.Errorf("ucx: %w: address blob: largest frame %d is below the minimum of %d", transport.ErrInvalidEndpoint, p.MaxFrame, MinEagerMax)
	}
	return p, nil
}

// frameHeaderLen is the length of an unsealed frame's header (every frame without credentials,
// and every hello); sealedHeaderLen that of a sealed data frame or fin, the seal included.
const (
	frameHeaderLen  = wire.UCXHeaderLen
	sealedHeaderLen = wire.UCXSealedHeaderLen
)

// The fin flags (see wire.UCXFinAsk).
const (
	finAsk = wire.UCXFinAsk
	finBye = wire.UCXFinBye
)

type frameKind = wire.UCXKind

const (
	kindData  = wire.UCXData
	kindHello = wire.UCXHello
	kindFin   = wire.UCXFin
)

// frameHeader is a decoded frame header, with the sender as an instance ID.
type frameHeader struct {
	Incarnation uint64
	Sender      transport.InstanceID
	Kind        frameKind
	Flags       byte
	Epoch       uint32
	Seq         uint64
}

var errMalformedFrame = errors.New("malformed ucx frame")

func appendHeader(dst []byte, h frameHeader) []byte {
	return wire.AppendUCXHeader(dst, wire.UCXHeader{Incarnation: h.Incarnation, Sender: uint64(h.Sender), Kind: h.Kind, Flags: h.Flags, Epoch: h.Epoch, Seq: h.Seq})
}

func decodeHeader(b []byte) (frameHeader, error) {
	h, err := wire.DecodeUCXHeader(b)
	if err != nil {
		return frameHeader{}, fmt.Errorf("%w: %w", errMalformedFrame, err)
	}
	return frameHeader{Incarnation: h.Incarnation, Sender: transport.InstanceID(h.Sender), Kind: h.Kind, Flags: h.Flags, Epoch: h.Epoch, Seq: h.Seq}, nil
}

// appendHelloBody is a hello's payload: the previous epoch and the sender's address blob.
func appendHelloBody(dst []byte, prevEpoch uint32, blob []byte) []byte {
	return wire.AppendUCXHelloBody(dst, prevEpoch, blob)
}

func decodeHelloBody(b []byte) (prevEpoch uint32, blob peerBlob, err error) {
	if len(b) < 4 {
		return 0, peerBlob{}, fmt.Errorf("%w: hello of %d bytes", errMalformedFrame, len(b))
	}
	prevEpoch, _, _ = wire.DecodeUCXHelloBody(b)
	blob, err = decodeBlob(b[4:])
	return prevEpoch, blob, err
}

func helloProofMsg(hdr, body []byte, receiver transport.InstanceID, receiverInc uint64) []byte {
	return wire.UCXHelloProofMsg(hdr, body, uint64(receiver), receiverInc)
}

func insertHelloProof(body, proof []byte) []byte { return wire.InsertUCXHelloProof(body, proof) }

func splitHelloProof(b []byte) (body, proof []byte, err error) {
	body, proof, err = wire.SplitUCXHelloProof(b)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", errMalformedFrame, err)
	}
	return body, proof, nil
}

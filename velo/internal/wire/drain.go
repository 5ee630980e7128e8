package wire

// DrainNotice is what a draining instance tells each peer (velo's "velo.drain" request): the
// incarnation that drains, so the peer marks that life of the instance, not a later one.
type DrainNotice struct{ Incarnation uint64 }

// AppendDrainNotice appends n's encoding to b: the incarnation, 8 bytes.
func AppendDrainNotice(b []byte, n DrainNotice) []byte {
	w := writer{b: b}
	w.u64(n.Incarnation)
	return w.b
}

// DecodeDrainNotice decodes a drain notice.
func DecodeDrainNotice(b []byte) (DrainNotice, error) {
	r := newReader("drain notice", b)
	n := DrainNotice{Incarnation: r.u64("incarnation")}
	return n, r.done()
}

// Package ucxt is velo's UCX transport: the runtime's frames over UCX active messages, and the
// one-sided reads (transport.RMA) that the rendezvous RDMA path is built on.
//
//	u, err := ucxt.New(ucxt.Config{EagerEndpoints: true, TLS: "tcp"})
//	v, err := velo.New(ctx, velo.WithTransport(tcp), velo.WithUCXTransport(u))
//
// Added with velo.WithUCXTransport the transport also carries the RDMA registry; added with
// velo.WithTransport it carries messages only.
//
// # How it is built, and why
//
// One UCX engine (package ucx) owns the context and worker on a locked OS thread; everything here
// is ordinary Go that submits work to it. This package has no cgo of its own, so it builds
// everywhere; without cgo New fails with ucx.ErrNotCompiled.
//
// Every frame is one active message sent eagerly (UCP_AM_SEND_FLAG_EAGER), never by UCX's
// rendezvous protocol: a receiver then gets each frame whole, in order, without a second round
// trip, and the eager limit (Config.EagerMax, advertised in the address blob) bounds what any peer
// must buffer. Larger payloads are the runtime's business: it stages them and sends a handle.
//
// Address blob and wire, version 2. The blob a peer publishes holds the wire version, its
// incarnation, its UCX worker address and its frame limit; AddPeer refuses any other version,
// because the frame header differs: every header starts with the sender's 8-byte incarnation,
// then its instance ID, the frame kind, the endpoint's epoch and a sequence number. The runtime's
// frame itself travels untouched as the message payload (copied once into UCX-owned memory, so
// that a Send whose context ends never leaves the caller's buffer in UCX's hands).
//
// Endpoints. Each side sends on its own endpoint to the other: created lazily by the first Send or
// Get, or by AddPeer with Config.EagerEndpoints (which also finishes UCX's wireup there, moving
// its cost out of the first transfer). The first message on every endpoint is a hello carrying the
// sender's blob, so a receiver can answer a peer that registered it without registering that peer
// itself. Endpoints use UCX's PEER error mode with keepalive: when one fails, the runtime hears
// Host.PeerDown and the next send opens a new endpoint.
//
// The idle reaper, and why it loses nothing. Config.EPIdleTimeout closes endpoints that carried
// nothing either way for that long. In the guide's implementation the peer of a reaped endpoint
// learns nothing, keeps sending into a dead connection and loses those messages until keepalive
// fails it. Here the reaper never just closes: it sends a fin as the last message on its endpoint
// and takes the endpoint out of use. The peer, on that fin, does the same with its own endpoint to
// us (its fin goes after everything it already sent), so both sides stop sending on the old pair
// before either closes it, and each opens a fresh endpoint on its next send. Frames on a fresh
// endpoint can overtake the tail of the old one (they are different connections), so every frame
// carries its endpoint's epoch and sequence number, the hello names the previous epoch and its
// last sequence number, and the receiver holds a newer epoch's frames until the older one is
// complete (type inbound). Gaps — frames lost with an endpoint that failed — are counted in
// velo_ucx_transport_frames_lost_total, never silently skipped.
//
// One-sided reads. RegisterMemory maps memory with ucp_mem_map; each call is its own registration
// with its own remote key, sealed by the engine in an envelope that names the region and the
// registration. Get checks the envelope's framing, checksum and range before any byte reaches
// ucp_ep_rkey_unpack (which has no length parameter). Over transports where UCX checks no remote
// keys itself (tcp, and any software-emulated RMA) the engine's guarded GET has the owner check
// that the registration is live and covers the range before it sends a byte, so a stale or forged
// key never yields owner bytes and never crashes the owner. Over InfiniBand RC the NIC checks the
// key; see transport_test.go for the one test that must not run there.
//
// Environment. UCX reads UCX_* variables, and they win over Config: TLS, NetDevices and
// KeepaliveInterval apply only where the variable is unset, so an operator can move a deployed
// binary onto another fabric without a rebuild. New logs which value applied from where, and
// Settings returns what the context really runs with. The ucx binding warns about
// UCX_PROTO_ENABLE=n (it turns off all RMA on current UCX releases) and sets UCX_RCACHE_ENABLE=n
// and UCX_MEM_EVENTS=n unless the user set them.
package ucxt

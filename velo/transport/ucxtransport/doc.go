// Package ucxtransport is velo's UCX transport: the runtime's frames over UCX active messages, and the
// one-sided reads (transport.RMA) that the rendezvous RDMA path is built on.
//
//	u, err := ucxtransport.New(ucxtransport.Config{EagerEndpoints: true, TLS: "tcp"})
//	v, err := velo.New(ctx, velo.WithTransport(tcp), velo.WithUCXTransport(u))
//
// Added with velo.WithUCXTransport the transport also carries the RDMA registry; added with
// velo.WithTransport it carries messages only.
//
// # How it is built, and why
//
// One UCX engine (package ucx) owns the context and worker (a serialized worker, posted to by the
// calling goroutine, progressed by the engine's progressor); everything here
// is ordinary Go that submits work to it. This package has no cgo of its own, so it builds
// everywhere; without cgo New fails with ucx.ErrNotCompiled.
//
// Every frame is one active message sent eagerly (UCP_AM_SEND_FLAG_EAGER), never by UCX's
// rendezvous protocol: a receiver then gets each frame whole, in order, without a second round
// trip, and the eager limit (Config.EagerMax, advertised in the address blob) bounds what any peer
// must buffer. Larger payloads are the runtime's business: it stages them and sends a handle.
//
// Address blob and wire, version 5. The blob a peer publishes holds the wire version, its
// incarnation, its UCX worker address, its frame limit and a CRC-32C of all that; AddPeer refuses
// any other version, because the frame header may differ, and a blob whose checksum does not
// match. Every frame header starts with the sender's 8-byte incarnation,
// then its instance ID, the frame kind, the endpoint's slot and a sequence number. The runtime's
// frame itself travels untouched as the message payload (copied once into UCX-owned memory, so
// that a Send whose context ends never leaves the caller's buffer in UCX's hands).
//
// Sealed frames. A UCX receiver cannot tell which remote endpoint a message came from, so a
// header is only what its sender wrote. When the runtime requires authenticated peers
// (transport.AuthGate) the hello carries a proof under the control plane's session key, and
// every data frame and fin after it a 24-byte seal (wire.UCXFrameKey): a nonce counter and an
// AES-256-GCM tag under a key the runtime derives from that session key and that hello — one key per endpoint and
// direction — over the header, the payload and the receiver's identity. The receiver checks
// proof or seal in one place, before it believes any header field; a frame
// that fails moves no sequence, retires no endpoint and reports no peer down, and is counted
// (velo_ucx_transport_frames_dropped_total: unauthenticated, bad_seal, replayed) and logged at
// most once per sender per 10 s. Each side keeps one cipher state per endpoint and direction, so
// sealing allocates nothing. Without credentials frames carry no seal and cost nothing more.
//
// Endpoints and slots. UCX pairs the n-th endpoint each side creates toward the other into one
// connection (ucp_ep_match), and when one side closes its endpoint the other's keeps accepting
// sends that never arrive: messages of more than one fragment and reply-carrying ones vanish
// without an error until keepalive gives up. TestUCXPairsNthEndpoints records it; it is the loss the guide describes for
// its idle reaper. So this transport numbers endpoints — the slot, carried in every frame header
// as the epoch — and keeps both sides' counts in step: the first message on every endpoint is a
// hello naming its slot and carrying the sender's blob, and a receiver at once creates its own
// endpoint of that slot (joining it, so that UCX pairs the two while both are alive). Each side
// sends on its endpoint of the newest slot. The hello also lets a receiver answer a peer that
// registered it without registering that peer itself. Endpoints are created lazily by the first
// Send or Get, or by AddPeer with Config.EagerEndpoints (which also finishes UCX's wireup there).
// They use UCX's PEER error mode with keepalive: when one fails, the runtime hears Host.PeerDown
// and the next send opens a new slot. A transport that closes says goodbye first: a fin marked
// finBye on its endpoint to each peer, so those peers report it down at once as departed (an Info
// log line, not a warning about a failed endpoint) and fail later sends to it with
// ErrPeerUnreachable instead of dialling a worker that is gone.
//
// The idle reaper, and why it loses nothing. Config.EPIdleTimeout retires a slot that carried
// nothing either way for that long. Retiring is an exchange of fins: the reaper's fin, the last
// message on its endpoint, asks the peer to follow; the peer retires its endpoint of the slot
// with a fin after everything it sent there (held back while a GET is in flight, so that no GET
// loses its reply, and until its frames' sends completed, because UCX may put a short message on
// the wire ahead of a longer one submitted before it). An endpoint closes only when its own fin went out, nothing of its own is in
// flight, and the peer has finished the slot — so neither side closes a connection the other still
// sends on. The next frame either way opens the next slot. Frames on a new slot can overtake the
// tail of the old one (they are different connections), so every frame carries its slot and a
// sequence number, each hello names the sender's previous slot and its last sequence number, and
// the receiver holds a newer slot's frames until the older one is complete (type inbound), and a
// slot's own frames that arrive ahead of an earlier one until that one comes. A gap — frames lost
// with an endpoint that failed — is given up on after a hold timeout and counted in
// velo_ucx_transport_frames_lost_total, never skipped silently.
//
// One-sided reads. RegisterMemory maps memory with ucp_mem_map; each call is its own registration
// with its own remote key, sealed by the engine in an envelope that names the region and the
// registration. Get checks the envelope's framing, checksum and range before any byte reaches
// ucp_ep_rkey_unpack (which has no length parameter). Over transports where UCX checks no remote
// keys itself (tcp, and any software-emulated RMA) the engine's guarded GET has the owner check
// that the registration is live and covers the range before it sends a byte, so a stale or forged
// key never yields owner bytes and never crashes the owner. Over InfiniBand RC the NIC checks the
// key.
//
// State. Per-peer bookkeeping (a few hundred bytes: the peer's address, its endpoint count and
// its receive order) lives until RemovePeer or Close; UCX's own endpoint count toward a worker
// lives as long as the worker, so the count survives RemovePeer.
//
// Environment. UCX reads UCX_* variables, and they win over Config: TLS, NetDevices and
// KeepaliveInterval apply only where the variable is unset, so an operator can move a deployed
// binary onto another fabric without a rebuild. New logs which value applied from where, and
// Settings returns what the context really runs with. The ucx binding warns about
// UCX_PROTO_ENABLE=n (it turns off all RMA on current UCX releases) and sets UCX_RCACHE_ENABLE=n
// and UCX_MEM_EVENTS=n unless the user set them.
//
// Where it listens. UCX's tcp transport listens on the interfaces UCX_NET_DEVICES allows, every
// active one by default. Where nothing names them (the variable, NetDevices, TCPInterfaces), New
// leaves the UCX worker for velo.New, which calls ScopeListen with its control plane's address:
// the worker then listens on that address's interface only (on every one for 0.0.0.0). Used
// without velo, the first call that needs the worker (Start, RegisterMemory, Collectors,
// Settings) creates it with UCX's defaults.
//
// The UCX it runs on. A stock UCX serves software-emulated RMA (tcp; ud on InfiniBand) at any
// address a peer names, so New runs only on a UCX whose patch set refuses that (velo's static
// build: make ucx-static, -tags ucx_static) unless VELO_UCX_TRUST_NETWORK=1 or
// Config.TrustNetwork trusts the network; otherwise it fails with ErrUnguardedUCX. docs/security.md
// gives the policy and the threat.
//
// Software lanes. A pair whose endpoint UCX built on software lanes only (tcp; ud without rc) gets
// no one-sided reads or writes by default: PathRefusal says software_lanes and the runtime moves
// the pair's payloads by chunks, which is as fast there. Config.RMAOverSoftwareLanes or
// VELO_UCX_SOFTWARE_RMA=1 keeps them.
package ucxtransport

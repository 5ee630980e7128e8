// What package capi's C files share and Go never sees: the argument of every AM callback, and
// the registration table behind the guarded GET (capi.c) and the guarded PUT (guardput.c): one
// slot per live registration, with the token a remote request must present, the range it
// covers and the access it grants. It all runs on the thread that progresses the worker, so
// nothing here locks.

#ifndef VELO_UCX_CAPI_PRIVATE_H
#define VELO_UCX_CAPI_PRIVATE_H

#include "capi.h"

/* The argument of an AM callback: the ring and the id it was registered for. */
struct velo_ucx_am_slot {
	velo_ucx_ring_t         *ring;
	unsigned                 id;
	struct velo_ucx_am_slot *next;
};

/* Registers cb for id with the id's slot as its argument (capi.c). */
ucs_status_t velo_ucx_set_handler_cb(velo_ucx_ring_t *ring, unsigned id, ucp_am_recv_callback_t cb);

enum { GUARD_FREE = 0, GUARD_LIVE = 1, GUARD_REVOKED = 2 };

typedef struct {
	uint64_t token, base, length;
	uint32_t inflight, state;
	uint32_t access; /* VELO_UCX_ACCESS_READ and/or VELO_UCX_ACCESS_WRITE */
	int32_t  memtype; /* ucs_memory_type_t of the memory, or VELO_UCX_MEMTYPE_UNSET */
	uint64_t holder;  /* the peer the key was given to (0: whoever presents the key) */
} guard_slot_t;

/* An endpoint the owner bound to a holder: a request that names a slot with a holder is served
 * only when it arrives on one of that holder's endpoints (velo_ucx_guard_bind_ep). */
typedef struct {
	ucp_ep_h ep;
	uint64_t holder;
} guard_ep_t;

struct velo_ucx_guard {
	guard_slot_t *slots;
	uint32_t      count, cap;
	uint32_t     *free_list;
	uint32_t      nfree;
	guard_ep_t   *eps;
	uint32_t      neps, epcap;
};

/* guard_holder_check decides whether a request for slot, arriving with reply endpoint ep, comes
 * from the slot's holder: UCS_OK when the slot has no holder or ep is one of the holder's,
 * UCS_ERR_NOT_CONNECTED when ep is bound to no holder yet (the holder's first request can
 * overtake the owner's own endpoint to it: the requester retries), UCS_ERR_REJECTED when ep is
 * another holder's. Every refusal is counted in ring->guard_refused_holder (capi.c). */
ucs_status_t velo_ucx_guard_holder_check(velo_ucx_ring_t *ring, const guard_slot_t *slot, ucp_ep_h ep);

#endif

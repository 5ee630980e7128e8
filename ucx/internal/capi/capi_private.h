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
} guard_slot_t;

struct velo_ucx_guard {
	guard_slot_t *slots;
	uint32_t      count, cap;
	uint32_t     *free_list;
	uint32_t      nfree;
};

#endif

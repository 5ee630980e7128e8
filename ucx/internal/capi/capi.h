// C side of package capi: the few helpers that cannot be one-line Go wrappers because UCX
// wants a callback or a parameter struct. Everything here runs on the thread that owns the
// worker (the thread calling ucp_worker_progress), so nothing here locks.
//
// Why an event ring instead of calling into Go from each callback: a cgo callback (C -> Go)
// costs a thread-state switch per message, and a callback that runs Go code inside
// ucp_worker_progress may not call back into UCX safely. So every callback here only appends
// a fixed-size record to a ring (and, for an active message, copies the header, which UCX
// frees when the callback returns); Go drains the whole ring in one call after progress.
// The measured difference is in docs/ucx.md.

#ifndef VELO_UCX_CAPI_H
#define VELO_UCX_CAPI_H

#include <stdint.h>
#include <stddef.h>
#include <ucp/api/ucp.h>
#include <uct/api/uct.h>
#include <ucm/api/ucm.h>

// Event kinds in the ring.
enum {
	VELO_EV_AM       = 1, // an active message arrived (header copied, data kept by UCX)
	VELO_EV_EP_ERROR = 2, // an endpoint's error handler ran
	VELO_EV_REQ_DONE = 3, // a request's completion callback ran
};

typedef struct velo_ucx_event {
	uint32_t kind;
	int32_t  status;     // ucs_status_t
	uint32_t am_id;      // VELO_EV_AM: the handler id
	uint32_t am_flags;   // VELO_EV_AM: ucp_am_recv_param_t.recv_attr
	uint64_t user;       // VELO_EV_REQ_DONE: the user id passed when the op was posted
	void    *handle;     // REQ_DONE: the request; EP_ERROR: the ucp_ep_h; AM: reply ep or NULL
	size_t   header_off; // VELO_EV_AM: offset of the copied header in the ring's byte arena
	size_t   header_len;
	void    *data;       // VELO_EV_AM: persistent data pointer, or the rendezvous descriptor
	size_t   data_len;
	size_t   length;     // REQ_DONE of ucp_am_recv_data_nbx: bytes received
} velo_ucx_event_t;

struct velo_ucx_am_slot;
struct velo_ucx_guard;
struct velo_ucx_gput;

// Why the target refused a guarded PUT: the index of its counter.
enum {
	VELO_UCX_PUT_REFUSED_MALFORMED = 0, // bad header, length, or data not sent eagerly
	VELO_UCX_PUT_REFUSED_REVOKED   = 1, // unknown slot, wrong token, revoked registration
	VELO_UCX_PUT_REFUSED_READONLY  = 2, // the registration grants no write access
	VELO_UCX_PUT_REFUSED_RANGE     = 3, // the range is not inside the registration
	VELO_UCX_PUT_REFUSED_HOLDER    = 4, // not on an endpoint of the peer the key was given to
	VELO_UCX_PUT_REFUSED_KINDS     = 5,
};

// What the guarded PUT did as target: served, refused by reason, and the last refusal.
typedef struct velo_ucx_gput_stats {
	uint64_t served;
	uint64_t served_bytes;
	uint64_t refused[VELO_UCX_PUT_REFUSED_KINDS];
	int32_t  last_reason; // -1 before the first refusal
	uint32_t last_slot;
	uint64_t last_address;
	uint64_t last_length;
} velo_ucx_gput_stats_t;

typedef struct velo_ucx_ring {
	velo_ucx_event_t        *events;
	size_t                   count, cap;
	uint8_t                 *bytes; // header arena; offsets stay valid when it grows
	size_t                   bytes_len, bytes_cap;
	uint64_t                 dropped; // records lost because malloc failed
	uint64_t                 unclaimed; // active messages for an id with no handler, dropped
	ucp_worker_h             worker;
	struct velo_ucx_am_slot *slots;  // one per registered AM id (the callback arg)
	struct velo_ucx_guard   *guard;  // guarded-GET registration table, or NULL
	uint32_t                 guard_req_id, guard_rep_id;
	uint32_t                 guardv_rep_id;
	uint64_t                 guard_served, guard_refused;
	// Guarded GETs and PUTs refused because they arrived on no endpoint of the key's holder.
	uint64_t                 guard_refused_holder;
	struct velo_ucx_gput    *gput;   // guarded-PUT state (guardput.c), or NULL
	// The guarded PUT's counters live in the ring, beside the GET's, so that Go reads them as
	// plain fields after every progress call instead of crossing into C for a copy.
	velo_ucx_gput_stats_t    gput_stats;
} velo_ucx_ring_t;

velo_ucx_ring_t *velo_ucx_ring_new(ucp_worker_h worker);
void velo_ucx_ring_free(velo_ucx_ring_t *ring);
void velo_ucx_ring_reset(velo_ucx_ring_t *ring);

ucs_status_t velo_ucx_init(ucp_config_t *config, uint64_t features, int mt_workers_shared,
                           ucp_context_h *context_p);
ucs_status_t velo_ucx_worker_create(ucp_context_h context, int thread_mode,
                                    ucp_worker_h *worker_p);
ucs_status_t velo_ucx_worker_max_am_header(ucp_worker_h worker, size_t *max_p);
ucs_status_t velo_ucx_config_print(const ucp_config_t *config, char **out, size_t *len);
ucs_status_t velo_ucx_ep_print_info(ucp_ep_h ep, char **out, size_t *len);

ucs_status_t velo_ucx_claim_am_ids(velo_ucx_ring_t *ring);
ucs_status_t velo_ucx_set_am_handler(velo_ucx_ring_t *ring, unsigned id, int enable);
ucs_status_t velo_ucx_ep_create(velo_ucx_ring_t *ring, const void *address, int err_mode_peer,
                                ucp_ep_h *ep_p);

void *velo_ucx_am_send(velo_ucx_ring_t *ring, ucp_ep_h ep, unsigned id, const void *header,
                       size_t header_len, const void *buffer, size_t count, int iov,
                       uint32_t flags, uint64_t user);
// memtype, in the calls that take it, is the ucs_memory_type_t of the local buffer, or
// VELO_UCX_MEMTYPE_UNSET to leave UCX to detect it (the field is then not set at all).
#define VELO_UCX_MEMTYPE_UNSET (-1)

void *velo_ucx_am_recv_data(velo_ucx_ring_t *ring, void *desc, void *buffer, size_t length,
                            int memtype, uint64_t user);
void *velo_ucx_am_recv_data_iov(velo_ucx_ring_t *ring, void *desc, void **bufs, const size_t *lens,
                                size_t count, int memtype, uint64_t user);
void *velo_ucx_get(velo_ucx_ring_t *ring, ucp_ep_h ep, void *buffer, size_t length,
                   uint64_t remote_addr, ucp_rkey_h rkey, int memtype, uint64_t user);
void *velo_ucx_put(velo_ucx_ring_t *ring, ucp_ep_h ep, const void *buffer, size_t length,
                   uint64_t remote_addr, ucp_rkey_h rkey, uint64_t user);
// One 32- or 64-bit atomic (size 4 or 8) at remote_addr; reply, when not NULL, receives the
// word's previous value (and holds the value a compare-and-swap stores).
void *velo_ucx_atomic(velo_ucx_ring_t *ring, ucp_ep_h ep, unsigned op, const void *value,
                      void *reply, size_t size, uint64_t remote_addr, ucp_rkey_h rkey,
                      uint64_t user);
void *velo_ucx_ep_flush(velo_ucx_ring_t *ring, ucp_ep_h ep, uint64_t user);
void *velo_ucx_worker_flush(velo_ucx_ring_t *ring, uint64_t user);
void *velo_ucx_ep_close(velo_ucx_ring_t *ring, ucp_ep_h ep, int force, uint64_t user);

// Status of a ucs_status_ptr_t: 0 with *req NULL when done, 1 (INPROGRESS) with *req set, or
// a negative error.
int velo_ucx_ptr_status(void *ptr);
int velo_ucx_ptr_is_req(void *ptr);

ucs_status_t velo_ucx_mem_map(ucp_context_h context, void *address, size_t length,
                              unsigned flags, int memtype, ucp_mem_h *memh_p);

// Guarded GET: see capi.c for the protocol and why it exists.
typedef struct velo_ucx_get_req_hdr {
	uint32_t magic;
	uint32_t slot;
	uint64_t token;
	uint64_t address;
	uint64_t length;
	uint64_t req_id;
} velo_ucx_get_req_hdr_t;

typedef struct velo_ucx_get_rep_hdr {
	uint64_t req_id;
	int32_t  status;
	uint32_t magic;
} velo_ucx_get_rep_hdr_t;

#define VELO_UCX_GUARD_MAGIC 0x56474731u /* "VGG1" */

// Vectored guarded GET: many reads, each with its own registration's slot and token, in one
// request; one reply carries a status per read and the bytes of the served ones, back to back.
typedef struct velo_ucx_getv_req_hdr {
	uint32_t magic;
	uint32_t count;
	uint64_t req_id;
} velo_ucx_getv_req_hdr_t; // followed by count velo_ucx_getv_entry_t

typedef struct velo_ucx_getv_entry {
	uint32_t slot;
	uint32_t reserved;
	uint64_t token;
	uint64_t address;
	uint64_t length;
} velo_ucx_getv_entry_t;

typedef struct velo_ucx_getv_rep_hdr {
	uint64_t req_id;
	uint32_t magic;
	uint32_t count;
} velo_ucx_getv_rep_hdr_t; // followed by count int32_t statuses

#define VELO_UCX_GUARDV_MAGIC 0x56475631u /* "VGV1" */
#define VELO_UCX_GUARDV_MAX   64          /* reads in one request */

ucs_status_t velo_ucx_guard_enable(velo_ucx_ring_t *ring, unsigned req_id, unsigned rep_id);
ucs_status_t velo_ucx_guardv_enable(velo_ucx_ring_t *ring, unsigned req_id, unsigned rep_id);
int velo_ucx_guard_add(velo_ucx_ring_t *ring, uint64_t token, uint64_t base, uint64_t length,
                       uint32_t *slot_p);
void velo_ucx_guard_revoke(velo_ucx_ring_t *ring, uint32_t slot);
uint32_t velo_ucx_guard_inflight(velo_ucx_ring_t *ring, uint32_t slot);
void velo_ucx_guard_release(velo_ucx_ring_t *ring, uint32_t slot);
// The memory type of a slot's memory (a guard_add leaves it VELO_UCX_MEMTYPE_UNSET): guarded
// replies send from it with that type, and a vectored request is served from one type only.
void velo_ucx_guard_set_memtype(velo_ucx_ring_t *ring, uint32_t slot, int memtype);
// Keys bound to their holder: a slot with a nonzero holder serves only requests that arrive on
// an endpoint bound to that holder. The owner binds each endpoint it opens to a peer, and unbinds
// it before the endpoint is closed (a freed endpoint's address may come back for another peer).
void velo_ucx_guard_set_holder(velo_ucx_ring_t *ring, uint32_t slot, uint64_t holder);
int velo_ucx_guard_bind_ep(velo_ucx_ring_t *ring, ucp_ep_h ep, uint64_t holder);
void velo_ucx_guard_unbind_ep(velo_ucx_ring_t *ring, ucp_ep_h ep);

// CUDA (cuda.c in a build with the cuda tag, nocuda.c otherwise). Each returns a CUresult
// (0 success); the build without CUDA returns VELO_CUDA_NOT_BUILT from all of them.
#define VELO_CUDA_NOT_BUILT (-1)
int velo_cuda_enabled(void);
int velo_cuda_device_count(int *count);
// The memory type (a ucs_memory_type_t) and device ordinal (-1 for host) of addr.
int velo_cuda_query(uint64_t addr, int *memtype, int *ordinal);
// A copy of n bytes, finished when it returns, between any two of host and device memory (unified
// addressing), on the primary context of the device that owns one of them.
int velo_cuda_copy(uint64_t dst, uint64_t src, size_t n);
const char *velo_cuda_error_name(int res);
// CUDA IPC (one host, two processes). export: the allocation addr lies in, as a 64-byte IPC
// handle (cuIpcGetMemHandle of the allocation's base), its base, size and process-wide buffer ID,
// its device's ordinal and 16-byte UUID. open: a handle of another process, mapped on the device
// with that UUID when this process sees it, else on device near (0 when near is negative);
// *ptr and *ordinal say where. close: cuIpcCloseMemHandle of an opened mapping. copy_on: as
// velo_cuda_copy, on the primary context of device ordinal (the one a mapping was opened on).
int velo_cuda_ipc_export(uint64_t addr, void *handle, uint64_t *base, uint64_t *size, uint64_t *buffer_id,
                         int *ordinal, void *uuid);
int velo_cuda_ipc_open(const void *handle, const void *uuid, int near, uint64_t *ptr, int *ordinal);
int velo_cuda_ipc_close(int ordinal, uint64_t ptr);
int velo_cuda_copy_on(int ordinal, uint64_t dst, uint64_t src, size_t n);

// Access a registration grants a remote peer: the guarded GET needs READ, the guarded PUT
// WRITE. velo_ucx_guard_add grants READ alone.
#define VELO_UCX_ACCESS_READ  1u
#define VELO_UCX_ACCESS_WRITE 2u
int velo_ucx_guard_add_access(velo_ucx_ring_t *ring, uint64_t token, uint64_t base,
                              uint64_t length, uint32_t access, uint32_t *slot_p);

// Guarded PUT: see guardput.c. The request header is followed by exactly length bytes of
// data, sent eagerly; the reply is the header alone.
typedef struct velo_ucx_put_req_hdr {
	uint32_t magic;
	uint32_t slot;
	uint64_t token;
	uint64_t address;
	uint64_t length;
	uint64_t req_id;
} velo_ucx_put_req_hdr_t;

typedef struct velo_ucx_put_rep_hdr {
	uint64_t req_id;
	int32_t  status;
	uint32_t magic;
} velo_ucx_put_rep_hdr_t;

#define VELO_UCX_GUARDPUT_MAGIC 0x56475031u /* "VGP1" */

// Vectored guarded PUT: many writes, each with its own registration's slot and token (the entry
// of the vectored GET), in one request whose data is their bytes back to back, sent eagerly. Each
// write is checked and copied on its own, exactly as a single request is; the reply carries a
// status per write.
typedef struct velo_ucx_putv_req_hdr {
	uint32_t magic;
	uint32_t count;
	uint64_t req_id;
} velo_ucx_putv_req_hdr_t; // followed by count velo_ucx_getv_entry_t

typedef struct velo_ucx_putv_rep_hdr {
	uint64_t req_id;
	uint32_t magic;
	uint32_t count;
} velo_ucx_putv_rep_hdr_t; // followed by count int32_t statuses

#define VELO_UCX_GUARDPUTV_MAGIC 0x56505631u /* "VPV1" */
#define VELO_UCX_GUARDPUTV_MAX   64          /* writes in one request */

// velo_ucx_guardput_enable answers single requests on req_id (replies on rep_id) and vectored
// ones on vreq_id (replies on vrep_id).
ucs_status_t velo_ucx_guardput_enable(velo_ucx_ring_t *ring, unsigned req_id, unsigned rep_id,
                                      unsigned vreq_id, unsigned vrep_id);

// Resource query (what ucx_info -d shows).
typedef struct velo_ucx_resource {
	char     component[UCT_COMPONENT_NAME_MAX];
	uint64_t component_flags;
	char     md[UCT_MD_NAME_MAX];
	int32_t  md_status;       // uct_md_open result; the rest of the md fields need UCS_OK
	uint64_t md_flags;
	size_t   rkey_packed_size;
	double   reg_cost_c, reg_cost_m;
	char     tl[UCT_TL_NAME_MAX];  // empty when the md has no transport resources
	char     dev[UCT_DEVICE_NAME_MAX];
	int32_t  dev_type;
	int32_t  sys_dev;
	int32_t  iface_status;    // uct_iface_open result; iface fields need UCS_OK
	uint64_t iface_flags;
	size_t   put_max_short, put_max_bcopy, put_max_zcopy;
	size_t   get_max_short, get_max_bcopy, get_max_zcopy;
	size_t   am_max_short, am_max_bcopy, am_max_zcopy, am_max_hdr;
	double   latency_c, bw_dedicated, bw_shared, overhead;
	size_t   max_num_eps;
	uint8_t  priority;
} velo_ucx_resource_t;

int velo_ucx_ucm_events_enabled(void);
void velo_ucx_ucm_set_events(int enable);
int velo_ucx_fault_signals_yielded(void);

ucs_status_t velo_ucx_query_resources(velo_ucx_resource_t **out, size_t *count);
int velo_ucx_symbol_loaded(const char *name);

#endif

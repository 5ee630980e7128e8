//go:build cgo && linux

// Helpers for package capi. See capi.h for why callbacks append to a ring.

#define _GNU_SOURCE
#include "capi.h"
#include "capi_private.h"

#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <pthread.h>
#include <sys/time.h>
#include <unistd.h>
#include <ucs/debug/debug.h>
#include <ucs/debug/log_def.h>
#include <ucs/async/async_fwd.h>

/* ---------------------------------------------------------------- event ring */

velo_ucx_ring_t *velo_ucx_ring_new(ucp_worker_h worker)
{
	velo_ucx_ring_t *ring = calloc(1, sizeof(*ring));
	if (ring != NULL) {
		ring->worker                 = worker;
		ring->gput_stats.last_reason = -1; /* no refusal yet */
	}
	return ring;
}

static void guard_free(struct velo_ucx_guard *guard);

void velo_ucx_ring_free(velo_ucx_ring_t *ring)
{
	struct velo_ucx_am_slot *slot, *next;

	if (ring == NULL) {
		return;
	}
	for (slot = ring->slots; slot != NULL; slot = next) {
		next = slot->next;
		free(slot);
	}
	guard_free(ring->guard);
	free(ring->gput);
	free(ring->events);
	free(ring->bytes);
	free(ring);
}

void velo_ucx_ring_reset(velo_ucx_ring_t *ring)
{
	ring->count     = 0;
	ring->bytes_len = 0;
}

static velo_ucx_event_t *ring_push(velo_ucx_ring_t *ring)
{
	velo_ucx_event_t *ev;
	size_t ncap;
	void *grown;

	if (ring->count == ring->cap) {
		ncap  = ring->cap ? ring->cap * 2 : 256;
		grown = realloc(ring->events, ncap * sizeof(*ring->events));
		if (grown == NULL) {
			ring->dropped++;
			return NULL;
		}
		ring->events = grown;
		ring->cap    = ncap;
	}
	ev = &ring->events[ring->count++];
	memset(ev, 0, sizeof(*ev));
	return ev;
}

/* Copies n bytes into the arena; returns 0 and the offset, or -1 when out of memory. */
static int ring_copy(velo_ucx_ring_t *ring, const void *p, size_t n, size_t *off)
{
	size_t ncap;
	void *grown;

	if (ring->bytes_len + n > ring->bytes_cap) {
		ncap = ring->bytes_cap ? ring->bytes_cap : 4096;
		while (ncap < ring->bytes_len + n) {
			ncap *= 2;
		}
		grown = realloc(ring->bytes, ncap);
		if (grown == NULL) {
			return -1;
		}
		ring->bytes     = grown;
		ring->bytes_cap = ncap;
	}
	if (n > 0) {
		memcpy(ring->bytes + ring->bytes_len, p, n);
	}
	*off = ring->bytes_len;
	ring->bytes_len += n;
	return 0;
}

/* Per-operation callback context: which ring to report to and the caller's id. */
typedef struct {
	velo_ucx_ring_t *ring;
	uint64_t         user;
	void            *extra; /* freed with the context (an iov the operation reads) */
} op_ctx_t;

static void push_done(velo_ucx_ring_t *ring, void *request, ucs_status_t status,
                      uint64_t user, size_t length)
{
	velo_ucx_event_t *ev = ring_push(ring);
	if (ev == NULL) {
		return; /* Go notices ring->dropped and polls its requests instead */
	}
	ev->kind   = VELO_EV_REQ_DONE;
	ev->status = status;
	ev->handle = request;
	ev->user   = user;
	ev->length = length;
}

static void ctx_free(op_ctx_t *ctx)
{
	free(ctx->extra);
	free(ctx);
}

static void send_cb(void *request, ucs_status_t status, void *user_data)
{
	op_ctx_t *ctx = user_data;
	push_done(ctx->ring, request, status, ctx->user, 0);
	ctx_free(ctx);
}

static void recv_data_cb(void *request, ucs_status_t status, size_t length, void *user_data)
{
	op_ctx_t *ctx = user_data;
	push_done(ctx->ring, request, status, ctx->user, length);
	ctx_free(ctx);
}

static void err_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
	velo_ucx_ring_t *ring = arg;
	velo_ucx_event_t *ev  = ring_push(ring);
	if (ev == NULL) {
		return;
	}
	ev->kind   = VELO_EV_EP_ERROR;
	ev->status = status;
	ev->handle = ep;
}

#define VELO_AM_DATA_IN_ARENA (1u << 31)

/* Messages up to this size are copied into the ring's arena inside the callback; larger
 * ones stay in UCX's descriptor until Go has copied them (one copy instead of two). */
#define VELO_AM_COPY_MAX (64 * 1024)

static ucs_status_t am_cb(void *arg, const void *header, size_t header_length, void *data,
                          size_t length, const ucp_am_recv_param_t *param)
{
	struct velo_ucx_am_slot *slot = arg;
	velo_ucx_ring_t *ring         = slot->ring;
	uint64_t attr                 = param->recv_attr;
	int keep = (attr & (UCP_AM_RECV_ATTR_FLAG_DATA | UCP_AM_RECV_ATTR_FLAG_RNDV)) != 0;
	velo_ucx_event_t *ev;
	size_t off;

	ev = ring_push(ring);
	if (ev == NULL) {
		return (attr & UCP_AM_RECV_ATTR_FLAG_RNDV) ? UCS_ERR_NO_MEMORY : UCS_OK;
	}
	if (ring_copy(ring, header, header_length, &off) != 0) {
		ring->count--;
		ring->dropped++;
		return (attr & UCP_AM_RECV_ATTR_FLAG_RNDV) ? UCS_ERR_NO_MEMORY : UCS_OK;
	}
	ev->kind       = VELO_EV_AM;
	ev->am_id      = slot->id;
	ev->am_flags   = (uint32_t)attr;
	ev->handle     = (attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ? param->reply_ep : NULL;
	ev->header_off = off;
	ev->header_len = header_length;
	ev->data_len   = length;
	if (keep && ((attr & UCP_AM_RECV_ATTR_FLAG_RNDV) || length > VELO_AM_COPY_MAX)) {
		ev->data = data;
		return UCS_INPROGRESS; /* Go receives or copies it, then releases it */
	}
	/* Small data: copying it into the arena now is cheaper than keeping UCX's
	 * descriptor and releasing it later with one more call per message. */
	if (ring_copy(ring, data, length, &off) != 0) {
		ring->count--;
		ring->dropped++;
		return UCS_OK;
	}
	ev->am_flags |= VELO_AM_DATA_IN_ARENA;
	ev->length    = off;
	return UCS_OK;
}

/* ---------------------------------------------------------------- UCX's log lines */

/* UCX writes its log lines to standard output unless UCX_LOG_FILE names another place. A
 * program that answers on its standard output (a tool printing JSON, a worker driven over a
 * pipe) then finds lines such as "connect(...) failed: Connection refused", which UCX prints
 * whenever a peer has gone away, in the middle of its own output, and whoever parses it reads
 * the wrong answer. So, unless the user chose a place with UCX_LOG_FILE (UCX_LOG_FILE=stdout
 * keeps UCX's own behaviour), the first context installs this handler in front of UCX's: it
 * prints each enabled line on standard error in UCX's short form and stops UCX's handler from
 * printing it again. Lines UCX logs while it loads, before any context exists (only at
 * UCX_LOG_LEVEL=debug and above), still go where UCX sends them. */

static char log_host[64];

static ucs_log_func_rc_t log_to_stderr(const char *file, unsigned line, const char *function,
                                       ucs_log_level_t level,
                                       const ucs_log_component_config_t *comp_conf,
                                       const char *format, va_list ap)
{
	char           msg[1024];
	const char    *base;
	struct timeval tv;

	(void)function;
	if (!ucs_log_component_is_enabled(level, comp_conf)) {
		return UCS_LOG_FUNC_RC_CONTINUE;
	}
	vsnprintf(msg, sizeof(msg), format, ap);
	base = strrchr(file, '/');
	gettimeofday(&tv, NULL);
	fprintf(stderr, "[%lu.%06lu] [%s:%d] %s:%u UCX %s %s\n", (unsigned long)tv.tv_sec,
	        (unsigned long)tv.tv_usec, log_host, (int)getpid(), base ? base + 1 : file, line,
	        ucs_log_level_names[level], msg);
	return UCS_LOG_FUNC_RC_STOP;
}

static void log_install(void)
{
	const char *chosen = getenv("UCX_LOG_FILE");

	if (chosen != NULL && chosen[0] != '\0') {
		return;
	}
	if (gethostname(log_host, sizeof(log_host) - 1) != 0) {
		strcpy(log_host, "?");
	}
	ucs_log_push_handler(log_to_stderr);
}

static pthread_once_t log_once = PTHREAD_ONCE_INIT;

/* ---------------------------------------------------------------- context and worker */

ucs_status_t velo_ucx_init(ucp_config_t *config, uint64_t features, int mt_workers_shared,
                           ucp_context_h *context_p)
{
	ucp_params_t params;

	pthread_once(&log_once, log_install);
	memset(&params, 0, sizeof(params));
	params.field_mask        = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
	params.features          = features;
	params.mt_workers_shared = mt_workers_shared;
	return ucp_init(&params, config, context_p);
}

ucs_status_t velo_ucx_worker_create(ucp_context_h context, int thread_mode,
                                    ucp_worker_h *worker_p)
{
	ucp_worker_params_t params;

	memset(&params, 0, sizeof(params));
	params.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
	params.thread_mode = (ucs_thread_mode_t)thread_mode;
	return ucp_worker_create(context, &params, worker_p);
}

ucs_status_t velo_ucx_worker_max_am_header(ucp_worker_h worker, size_t *max_p)
{
	ucp_worker_attr_t attr;
	ucs_status_t status;

	memset(&attr, 0, sizeof(attr));
	attr.field_mask = UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER;
	status          = ucp_worker_query(worker, &attr);
	if (status == UCS_OK) {
		*max_p = attr.max_am_header;
	}
	return status;
}

ucs_status_t velo_ucx_config_print(const ucp_config_t *config, char **out, size_t *len)
{
	FILE *stream = open_memstream(out, len);
	if (stream == NULL) {
		return UCS_ERR_NO_MEMORY;
	}
	ucp_config_print(config, stream, NULL, UCS_CONFIG_PRINT_CONFIG);
	fclose(stream);
	return UCS_OK;
}

ucs_status_t velo_ucx_ep_print_info(ucp_ep_h ep, char **out, size_t *len)
{
	FILE *stream = open_memstream(out, len);
	if (stream == NULL) {
		return UCS_ERR_NO_MEMORY;
	}
	ucp_ep_print_info(ep, stream);
	fclose(stream);
	return UCS_OK;
}

/* ---------------------------------------------------------------- active messages */

static struct velo_ucx_am_slot *am_slot(velo_ucx_ring_t *ring, unsigned id)
{
	struct velo_ucx_am_slot *slot;

	for (slot = ring->slots; slot != NULL; slot = slot->next) {
		if (slot->id == id) {
			return slot;
		}
	}
	slot = calloc(1, sizeof(*slot));
	if (slot == NULL) {
		return NULL;
	}
	slot->ring  = ring;
	slot->id    = id;
	slot->next  = ring->slots;
	ring->slots = slot;
	return slot;
}

static ucs_status_t register_am(velo_ucx_ring_t *ring, unsigned id, ucp_am_recv_callback_t cb,
                                void *arg)
{
	ucp_am_handler_param_t param;

	memset(&param, 0, sizeof(param));
	param.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
	                   UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
	param.id    = id;
	param.flags = UCP_AM_FLAG_WHOLE_MSG;
	param.cb    = cb;
	param.arg   = arg;
	return ucp_worker_set_am_recv_handler(ring->worker, &param);
}

/* Registers cb for id with the id's slot as its argument. */
static ucs_status_t set_handler(velo_ucx_ring_t *ring, unsigned id, ucp_am_recv_callback_t cb)
{
	struct velo_ucx_am_slot *slot = am_slot(ring, id);

	if (slot == NULL) {
		return UCS_ERR_NO_MEMORY;
	}
	return register_am(ring, id, cb, slot);
}

ucs_status_t velo_ucx_set_handler_cb(velo_ucx_ring_t *ring, unsigned id, ucp_am_recv_callback_t cb)
{
	return set_handler(ring, id, cb);
}

/* The callback of every id nobody handles: the message is counted and dropped here, and
 * UCX frees its data (or tells a rendezvous sender it is done). */
static ucs_status_t unclaimed_am_cb(void *arg, const void *header, size_t header_length,
                                    void *data, size_t length, const ucp_am_recv_param_t *param)
{
	velo_ucx_ring_t *ring = arg;

	ring->unclaimed++;
	return UCS_OK;
}

static ucs_status_t set_unclaimed(velo_ucx_ring_t *ring, unsigned id)
{
	return register_am(ring, id, unclaimed_am_cb, ring);
}

/* Gives every AM id a handler, in ascending order, before anything else registers one.
 * UCX 1.13 grows its handler table without initialising the entries it adds (only the id
 * being registered), so a message for any other id below the table's end jumps through
 * whatever that memory held; a peer can send any id. Registering the ids in order leaves no
 * entry below 0x10000 unwritten; later releases fill the gaps themselves, and there this
 * turns UCX's warning per unknown message into a count. The table is as large either way
 * (the engine's own ids sit at the top of the range). */
ucs_status_t velo_ucx_claim_am_ids(velo_ucx_ring_t *ring)
{
	ucs_status_t status;
	unsigned id;

	for (id = 0; id <= UINT16_MAX; id++) {
		status = set_unclaimed(ring, id);
		if (status != UCS_OK) {
			return status;
		}
	}
	return UCS_OK;
}

ucs_status_t velo_ucx_set_am_handler(velo_ucx_ring_t *ring, unsigned id, int enable)
{
	return enable ? set_handler(ring, id, am_cb) : set_unclaimed(ring, id);
}

ucs_status_t velo_ucx_ep_create(velo_ucx_ring_t *ring, const void *address, int err_mode_peer,
                                ucp_ep_h *ep_p)
{
	ucp_ep_params_t params;

	memset(&params, 0, sizeof(params));
	params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
	                    UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
	params.address        = address;
	params.err_mode       = err_mode_peer ? UCP_ERR_HANDLING_MODE_PEER :
	                                        UCP_ERR_HANDLING_MODE_NONE;
	params.err_handler.cb = err_cb;
	params.err_handler.arg = ring;
	return ucp_ep_create(ring->worker, &params, ep_p);
}

/* Fills param with a completion callback that reports to the ring. Returns the context to
 * free when the operation does not return a request, or NULL when out of memory. */
static op_ctx_t *op_param(velo_ucx_ring_t *ring, uint64_t user, ucp_request_param_t *param)
{
	op_ctx_t *ctx = malloc(sizeof(*ctx));
	if (ctx == NULL) {
		return NULL;
	}
	ctx->ring  = ring;
	ctx->user  = user;
	ctx->extra = NULL;
	memset(param, 0, sizeof(*param));
	param->op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
	param->cb.send      = send_cb;
	param->user_data    = ctx;
	return ctx;
}

static void *op_result(void *ptr, op_ctx_t *ctx)
{
	if (!UCS_PTR_IS_PTR(ptr)) {
		ctx_free(ctx); /* completed at once or failed: the callback will not run */
	}
	return ptr;
}

void *velo_ucx_am_send(velo_ucx_ring_t *ring, ucp_ep_h ep, unsigned id, const void *header,
                       size_t header_len, const void *buffer, size_t count, int iov,
                       uint32_t flags, uint64_t user)
{
	ucp_request_param_t param;
	op_ctx_t *ctx = op_param(ring, user, &param);

	if (ctx == NULL) {
		return UCS_STATUS_PTR(UCS_ERR_NO_MEMORY);
	}
	param.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
	param.flags         = flags;
	if (iov) {
		param.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
		param.datatype      = ucp_dt_make_iov();
	}
	return op_result(ucp_am_send_nbx(ep, id, header, header_len, buffer, count, &param), ctx);
}

/* Tells UCX the local buffer's memory type, unless it is VELO_UCX_MEMTYPE_UNSET. */
static void op_memtype(ucp_request_param_t *param, int memtype)
{
	if (memtype >= 0) {
		param->op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
		param->memory_type   = (ucs_memory_type_t)memtype;
	}
}

void *velo_ucx_am_recv_data(velo_ucx_ring_t *ring, void *desc, void *buffer, size_t length,
                            int memtype, uint64_t user)
{
	ucp_request_param_t param;
	op_ctx_t *ctx = op_param(ring, user, &param);

	if (ctx == NULL) {
		return UCS_STATUS_PTR(UCS_ERR_NO_MEMORY);
	}
	param.cb.recv_am = recv_data_cb;
	op_memtype(&param, memtype);
	return op_result(ucp_am_recv_data_nbx(ring->worker, desc, buffer, length, &param), ctx);
}

void *velo_ucx_am_recv_data_iov(velo_ucx_ring_t *ring, void *desc, void **bufs, const size_t *lens,
                                size_t count, int memtype, uint64_t user)
{
	ucp_request_param_t param;
	op_ctx_t *ctx = op_param(ring, user, &param);
	ucp_dt_iov_t *iov;
	size_t i;

	if (ctx == NULL) {
		return UCS_STATUS_PTR(UCS_ERR_NO_MEMORY);
	}
	iov = calloc(count ? count : 1, sizeof(*iov));
	if (iov == NULL) {
		free(ctx);
		return UCS_STATUS_PTR(UCS_ERR_NO_MEMORY);
	}
	for (i = 0; i < count; i++) {
		iov[i].buffer = bufs[i];
		iov[i].length = lens[i];
	}
	ctx->extra          = iov;
	param.cb.recv_am    = recv_data_cb;
	param.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
	param.datatype      = ucp_dt_make_iov();
	op_memtype(&param, memtype);
	return op_result(ucp_am_recv_data_nbx(ring->worker, desc, iov, count, &param), ctx);
}

void *velo_ucx_get(velo_ucx_ring_t *ring, ucp_ep_h ep, void *buffer, size_t length,
                   uint64_t remote_addr, ucp_rkey_h rkey, int memtype, uint64_t user)
{
	ucp_request_param_t param;
	op_ctx_t *ctx = op_param(ring, user, &param);

	if (ctx == NULL) {
		return UCS_STATUS_PTR(UCS_ERR_NO_MEMORY);
	}
	op_memtype(&param, memtype);
	return op_result(ucp_get_nbx(ep, buffer, length, remote_addr, rkey, &param), ctx);
}

void *velo_ucx_put(velo_ucx_ring_t *ring, ucp_ep_h ep, const void *buffer, size_t length,
                   uint64_t remote_addr, ucp_rkey_h rkey, uint64_t user)
{
	ucp_request_param_t param;
	op_ctx_t *ctx = op_param(ring, user, &param);

	if (ctx == NULL) {
		return UCS_STATUS_PTR(UCS_ERR_NO_MEMORY);
	}
	return op_result(ucp_put_nbx(ep, buffer, length, remote_addr, rkey, &param), ctx);
}

void *velo_ucx_atomic(velo_ucx_ring_t *ring, ucp_ep_h ep, unsigned op, const void *value,
                      void *reply, size_t size, uint64_t remote_addr, ucp_rkey_h rkey,
                      uint64_t user)
{
	ucp_request_param_t param;
	op_ctx_t *ctx = op_param(ring, user, &param);

	if (ctx == NULL) {
		return UCS_STATUS_PTR(UCS_ERR_NO_MEMORY);
	}
	param.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
	param.datatype      = ucp_dt_make_contig(size);
	if (reply != NULL) {
		param.op_attr_mask |= UCP_OP_ATTR_FIELD_REPLY_BUFFER;
		param.reply_buffer  = reply;
	}
	return op_result(ucp_atomic_op_nbx(ep, (ucp_atomic_op_t)op, value, 1, remote_addr, rkey,
	                                   &param), ctx);
}

void *velo_ucx_ep_flush(velo_ucx_ring_t *ring, ucp_ep_h ep, uint64_t user)
{
	ucp_request_param_t param;
	op_ctx_t *ctx = op_param(ring, user, &param);

	if (ctx == NULL) {
		return UCS_STATUS_PTR(UCS_ERR_NO_MEMORY);
	}
	return op_result(ucp_ep_flush_nbx(ep, &param), ctx);
}

void *velo_ucx_worker_flush(velo_ucx_ring_t *ring, uint64_t user)
{
	ucp_request_param_t param;
	op_ctx_t *ctx = op_param(ring, user, &param);

	if (ctx == NULL) {
		return UCS_STATUS_PTR(UCS_ERR_NO_MEMORY);
	}
	return op_result(ucp_worker_flush_nbx(ring->worker, &param), ctx);
}

void *velo_ucx_ep_close(velo_ucx_ring_t *ring, ucp_ep_h ep, int force, uint64_t user)
{
	ucp_request_param_t param;
	op_ctx_t *ctx = op_param(ring, user, &param);

	if (ctx == NULL) {
		return UCS_STATUS_PTR(UCS_ERR_NO_MEMORY);
	}
	param.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
	param.flags         = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
	return op_result(ucp_ep_close_nbx(ep, &param), ctx);
}

int velo_ucx_ptr_status(void *ptr)
{
	return UCS_PTR_STATUS(ptr);
}

int velo_ucx_ptr_is_req(void *ptr)
{
	return UCS_PTR_IS_PTR(ptr);
}

ucs_status_t velo_ucx_mem_map(ucp_context_h context, void *address, size_t length,
                              unsigned flags, int memtype, ucp_mem_h *memh_p)
{
	ucp_mem_map_params_t params;

	memset(&params, 0, sizeof(params));
	params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
	                    UCP_MEM_MAP_PARAM_FIELD_FLAGS;
	params.address = address;
	params.length  = length;
	params.flags   = flags;
	if (memtype >= 0) {
		params.field_mask |= UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
		params.memory_type = (ucs_memory_type_t)memtype;
	}
	return ucp_mem_map(context, &params, memh_p);
}

/* ---------------------------------------------------------------- guarded GET
 *
 * Over transports without hardware RMA (tcp; UCX emulates GET in software there) the
 * owner's UCX answers a GET by reading whatever address the request names: it never looks
 * at the remote key, so a stale or forged key still reads owner memory, and an address that
 * is no longer mapped kills the owner with SIGSEGV (measured on UCX 1.13; see docs/ucx.md).
 * The guarded GET replaces that emulation with our own two active messages: the consumer
 * asks (slot, token, address, length); the owner checks the request against its table of
 * live registrations here, on the progress thread, and only then sends the bytes back. A
 * revoked, unknown or out-of-range request gets an error status and no data.
 *
 * The reply is sent from inside the request's callback because the reply endpoint UCX hands
 * us is only guaranteed to be valid during that callback. A registration counts replies in
 * flight; Go defers ucp_mem_unmap until that count is zero, so a reply never reads memory
 * the owner already released. */

/* The registration table (guard_slot_t, struct velo_ucx_guard) is in capi_private.h: the guarded
 * PUT (guardput.c) checks the same slots. */

typedef struct {
	velo_ucx_ring_t        *ring;
	uint32_t                slot; /* UINT32_MAX when the reply carries no data */
	velo_ucx_get_rep_hdr_t  hdr;  /* must stay valid until the send completes */
} guard_reply_t;

static void guard_free(struct velo_ucx_guard *guard)
{
	if (guard == NULL) {
		return;
	}
	free(guard->slots);
	free(guard->free_list);
	free(guard->eps);
	free(guard);
}

/* Keys bound to their holder. A guarded request carries slot, token, address and length in the
 * clear, so whoever watches the wire learns a live key; what such an onlooker cannot choose is
 * the endpoint a request arrives on. UCX hands the callback the reply endpoint, the owner's
 * endpoint connected to the requester, and the bytes of a served GET leave on that endpoint
 * alone. The owner binds each endpoint it opens to the peer it opened it for; a request for a
 * slot given to a holder is served only when that endpoint is one of the holder's. A request
 * from an outsider's own endpoint is refused; one whose reply endpoint id is forged to name the
 * holder's endpoint makes the owner send the bytes to the holder, never to the outsider. */
ucs_status_t velo_ucx_guard_holder_check(velo_ucx_ring_t *ring, const guard_slot_t *slot, ucp_ep_h ep)
{
	struct velo_ucx_guard *guard = ring->guard;
	uint32_t i;

	if (slot->holder == 0) {
		return UCS_OK;
	}
	for (i = 0; guard != NULL && i < guard->neps; i++) {
		if (guard->eps[i].ep == ep) {
			if (guard->eps[i].holder == slot->holder) {
				return UCS_OK;
			}
			ring->guard_refused_holder++;
			return UCS_ERR_REJECTED;
		}
	}
	ring->guard_refused_holder++;
	return UCS_ERR_NOT_CONNECTED;
}

void velo_ucx_guard_set_holder(velo_ucx_ring_t *ring, uint32_t slot, uint64_t holder)
{
	if (ring->guard != NULL && slot < ring->guard->count) {
		ring->guard->slots[slot].holder = holder;
	}
}

int velo_ucx_guard_bind_ep(velo_ucx_ring_t *ring, ucp_ep_h ep, uint64_t holder)
{
	struct velo_ucx_guard *guard = ring->guard;
	uint32_t i;
	void *grown;

	if (guard == NULL) {
		return -1;
	}
	for (i = 0; i < guard->neps; i++) {
		if (guard->eps[i].ep == ep) {
			guard->eps[i].holder = holder;
			return 0;
		}
	}
	if (guard->neps == guard->epcap) {
		uint32_t ncap = guard->epcap ? guard->epcap * 2 : 16;
		grown = realloc(guard->eps, ncap * sizeof(*guard->eps));
		if (grown == NULL) {
			return -1;
		}
		guard->eps   = grown;
		guard->epcap = ncap;
	}
	guard->eps[guard->neps].ep     = ep;
	guard->eps[guard->neps].holder = holder;
	guard->neps++;
	return 0;
}

void velo_ucx_guard_unbind_ep(velo_ucx_ring_t *ring, ucp_ep_h ep)
{
	struct velo_ucx_guard *guard = ring->guard;
	uint32_t i;

	for (i = 0; guard != NULL && i < guard->neps; i++) {
		if (guard->eps[i].ep == ep) {
			guard->eps[i] = guard->eps[--guard->neps];
			return;
		}
	}
}

/* A reply that read slot s has left (sent or failed): the slot's registration may now be
 * unmapped by Go once no reply reads it. Out-of-range slots (a refused request,
 * UINT32_MAX) and a ring whose guard is gone are ignored. */
static void guard_slot_reply_done(struct velo_ucx_guard *guard, uint32_t s)
{
	if (guard != NULL && s < guard->count && guard->slots[s].inflight > 0) {
		guard->slots[s].inflight--;
	}
}

static void guard_reply_finish(guard_reply_t *reply)
{
	guard_slot_reply_done(reply->ring->guard, reply->slot);
	free(reply);
}

static void guard_reply_cb(void *request, ucs_status_t status, void *user_data)
{
	guard_reply_finish(user_data);
	ucp_request_free(request);
}

static ucs_status_t guard_req_cb(void *arg, const void *header, size_t header_length,
                                 void *data, size_t length, const ucp_am_recv_param_t *param)
{
	struct velo_ucx_am_slot *amslot = arg;
	velo_ucx_ring_t *ring           = amslot->ring;
	struct velo_ucx_guard *guard    = ring->guard;
	velo_ucx_get_req_hdr_t req;
	ucp_request_param_t rp;
	guard_reply_t *reply;
	guard_slot_t *slot;
	const void *buffer = NULL;
	size_t count       = 0;
	int memtype        = VELO_UCX_MEMTYPE_UNSET;
	void *ptr;

	if (header_length != sizeof(req) || !(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)) {
		ring->guard_refused++; /* not ours, or no way to answer */
		return UCS_OK;
	}
	memcpy(&req, header, sizeof(req));
	reply = calloc(1, sizeof(*reply));
	if (reply == NULL) {
		ring->guard_refused++;
		return UCS_OK;
	}
	reply->ring       = ring;
	reply->slot       = UINT32_MAX;
	reply->hdr.req_id = req.req_id;
	reply->hdr.magic  = VELO_UCX_GUARD_MAGIC;
	reply->hdr.status = UCS_ERR_REJECTED;
	if (req.magic == VELO_UCX_GUARD_MAGIC && guard != NULL && req.slot < guard->count) {
		slot = &guard->slots[req.slot];
		if (slot->state == GUARD_LIVE && slot->token == req.token &&
		    (slot->access & VELO_UCX_ACCESS_READ)) {
			reply->hdr.status = velo_ucx_guard_holder_check(ring, slot, param->reply_ep);
			if (reply->hdr.status == UCS_OK &&
			    !(req.address >= slot->base && req.length <= slot->length &&
			      req.address - slot->base <= slot->length - req.length)) {
				reply->hdr.status = UCS_ERR_INVALID_ADDR;
			}
			if (reply->hdr.status == UCS_OK) {
				reply->slot = req.slot;
				buffer      = (const void*)(uintptr_t)req.address;
				count       = req.length;
				memtype     = slot->memtype;
				slot->inflight++;
			}
		}
	}
	if (reply->hdr.status == UCS_OK) {
		ring->guard_served++;
	} else {
		ring->guard_refused++;
	}

	memset(&rp, 0, sizeof(rp));
	rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
	rp.cb.send      = guard_reply_cb;
	rp.user_data    = reply;
	if (count > 0) {
		op_memtype(&rp, memtype); /* the reply is sent from the registered memory itself */
	}
	ptr = ucp_am_send_nbx(param->reply_ep, ring->guard_rep_id, &reply->hdr, sizeof(reply->hdr),
	                      buffer, count, &rp);
	if (!UCS_PTR_IS_PTR(ptr)) {
		guard_reply_finish(reply);
	}
	return UCS_OK;
}

/* The vectored request: each read is checked on its own, exactly as a single request is, and
 * the served ones are sent back in one message from the registered memory itself (an iov, no
 * copy). Every slot a read was served from counts the reply in flight until it completes. */
typedef struct {
	velo_ucx_ring_t *ring;
	uint32_t         count;
	uint32_t         nslots;
	uint32_t        *slots;   /* slots with a reply in flight */
	ucp_dt_iov_t    *iov;
	uint8_t         *hdr;     /* velo_ucx_getv_rep_hdr_t + count statuses */
	size_t           hdr_len;
} guardv_reply_t;

static void guardv_reply_finish(guardv_reply_t *reply)
{
	struct velo_ucx_guard *guard = reply->ring->guard;
	uint32_t i;

	for (i = 0; i < reply->nslots; i++) {
		guard_slot_reply_done(guard, reply->slots[i]);
	}
	free(reply);
}

static void guardv_reply_cb(void *request, ucs_status_t status, void *user_data)
{
	guardv_reply_finish(user_data);
	ucp_request_free(request);
}

static ucs_status_t guardv_req_cb(void *arg, const void *header, size_t header_length,
                                  void *data, size_t length, const ucp_am_recv_param_t *param)
{
	struct velo_ucx_am_slot *amslot = arg;
	velo_ucx_ring_t *ring           = amslot->ring;
	struct velo_ucx_guard *guard    = ring->guard;
	velo_ucx_getv_req_hdr_t req;
	velo_ucx_getv_rep_hdr_t rep;
	velo_ucx_getv_entry_t e;
	ucp_request_param_t rp;
	guardv_reply_t *reply;
	int32_t status;
	size_t size, niov = 0;
	uint32_t i;
	int memtype = VELO_UCX_MEMTYPE_UNSET, served = 0;
	void *ptr;

	if (header_length < sizeof(req) || !(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)) {
		ring->guard_refused++;
		return UCS_OK;
	}
	memcpy(&req, header, sizeof(req));
	if (req.magic != VELO_UCX_GUARDV_MAGIC || req.count == 0 || req.count > VELO_UCX_GUARDV_MAX ||
	    header_length != sizeof(req) + (size_t)req.count * sizeof(e)) {
		ring->guard_refused++; /* a reply without a count the requester can match is useless */
		return UCS_OK;
	}
	/* One allocation: the reply, the slots, the iov and the header with its statuses. */
	size  = sizeof(*reply) + req.count * (sizeof(uint32_t) + sizeof(ucp_dt_iov_t)) +
	        sizeof(rep) + req.count * sizeof(int32_t);
	reply = calloc(1, size);
	if (reply == NULL) {
		ring->guard_refused += req.count;
		return UCS_OK;
	}
	reply->ring    = ring;
	reply->count   = req.count;
	reply->iov     = (ucp_dt_iov_t*)(reply + 1);
	reply->slots   = (uint32_t*)(reply->iov + req.count);
	reply->hdr     = (uint8_t*)(reply->slots + req.count);
	reply->hdr_len = sizeof(rep) + req.count * sizeof(int32_t);
	rep.req_id = req.req_id;
	rep.magic  = VELO_UCX_GUARDV_MAGIC;
	rep.count  = req.count;
	memcpy(reply->hdr, &rep, sizeof(rep));
	for (i = 0; i < req.count; i++) {
		guard_slot_t *slot;

		memcpy(&e, (const uint8_t*)header + sizeof(req) + i * sizeof(e), sizeof(e));
		status = UCS_ERR_REJECTED;
		if (guard != NULL && e.slot < guard->count) {
			slot = &guard->slots[e.slot];
			if (slot->state == GUARD_LIVE && slot->token == e.token &&
			    (slot->access & VELO_UCX_ACCESS_READ)) {
				status = velo_ucx_guard_holder_check(ring, slot, param->reply_ep);
				if (status == UCS_OK &&
				    !(e.address >= slot->base && e.length <= slot->length &&
				      e.address - slot->base <= slot->length - e.length)) {
					status = UCS_ERR_INVALID_ADDR;
				}
				/* One message has one memory type: the reads it serves all come from
				 * memory of the first served read's type; the others are refused. */
				if (status == UCS_OK && served && slot->memtype != memtype) {
					status = UCS_ERR_UNSUPPORTED;
				}
			}
		}
		if (status == UCS_OK) {
			if (!served) {
				memtype = guard->slots[e.slot].memtype;
				served  = 1;
			}
			guard->slots[e.slot].inflight++;
			reply->slots[reply->nslots++] = e.slot;
			if (e.length > 0) {
				reply->iov[niov].buffer = (void*)(uintptr_t)e.address;
				reply->iov[niov].length = e.length;
				niov++;
			}
			ring->guard_served++;
		} else {
			ring->guard_refused++;
		}
		memcpy(reply->hdr + sizeof(rep) + i * sizeof(int32_t), &status, sizeof(status));
	}

	memset(&rp, 0, sizeof(rp));
	rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
	rp.cb.send      = guardv_reply_cb;
	rp.user_data    = reply;
	if (niov > 0) {
		/* An empty iov is not an iov to UCX: with every read refused, the reply is the
		 * statuses alone, sent contiguous (UCX 1.13 asserts on a NULL iov, and its
		 * assertions abort the owner). */
		rp.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
		rp.datatype      = ucp_dt_make_iov();
		op_memtype(&rp, memtype);
	}
	ptr = ucp_am_send_nbx(param->reply_ep, ring->guardv_rep_id, reply->hdr, reply->hdr_len,
	                      niov ? reply->iov : NULL, niov, &rp);
	if (!UCS_PTR_IS_PTR(ptr)) {
		guardv_reply_finish(reply);
	}
	return UCS_OK;
}

ucs_status_t velo_ucx_guardv_enable(velo_ucx_ring_t *ring, unsigned req_id, unsigned rep_id)
{
	if (ring->guard == NULL) {
		return UCS_ERR_INVALID_PARAM; /* velo_ucx_guard_enable first */
	}
	ring->guardv_rep_id = rep_id;
	return set_handler(ring, req_id, guardv_req_cb);
}

ucs_status_t velo_ucx_guard_enable(velo_ucx_ring_t *ring, unsigned req_id, unsigned rep_id)
{
	if (ring->guard == NULL) {
		ring->guard = calloc(1, sizeof(*ring->guard));
		if (ring->guard == NULL) {
			return UCS_ERR_NO_MEMORY;
		}
	}
	ring->guard_req_id = req_id;
	ring->guard_rep_id = rep_id;
	return set_handler(ring, req_id, guard_req_cb);
}

int velo_ucx_guard_add(velo_ucx_ring_t *ring, uint64_t token, uint64_t base, uint64_t length,
                       uint32_t *slot_p)
{
	return velo_ucx_guard_add_access(ring, token, base, length, VELO_UCX_ACCESS_READ, slot_p);
}

int velo_ucx_guard_add_access(velo_ucx_ring_t *ring, uint64_t token, uint64_t base,
                              uint64_t length, uint32_t access, uint32_t *slot_p)
{
	struct velo_ucx_guard *guard = ring->guard;
	uint32_t index;
	void *grown;

	if (guard == NULL) {
		return -1;
	}
	if (guard->nfree > 0) {
		index = guard->free_list[--guard->nfree];
	} else {
		if (guard->count == guard->cap) {
			uint32_t ncap = guard->cap ? guard->cap * 2 : 64;
			grown = realloc(guard->slots, ncap * sizeof(*guard->slots));
			if (grown == NULL) {
				return -1;
			}
			guard->slots = grown;
			grown = realloc(guard->free_list, ncap * sizeof(*guard->free_list));
			if (grown == NULL) {
				return -1;
			}
			guard->free_list = grown;
			guard->cap       = ncap;
		}
		index = guard->count++;
	}
	guard->slots[index].token    = token;
	guard->slots[index].base     = base;
	guard->slots[index].length   = length;
	guard->slots[index].inflight = 0;
	guard->slots[index].state    = GUARD_LIVE;
	guard->slots[index].access   = access;
	guard->slots[index].memtype  = VELO_UCX_MEMTYPE_UNSET;
	guard->slots[index].holder   = 0;
	*slot_p = index;
	return 0;
}

void velo_ucx_guard_revoke(velo_ucx_ring_t *ring, uint32_t slot)
{
	if (ring->guard != NULL && slot < ring->guard->count) {
		ring->guard->slots[slot].state = GUARD_REVOKED;
	}
}

void velo_ucx_guard_set_memtype(velo_ucx_ring_t *ring, uint32_t slot, int memtype)
{
	if (ring->guard != NULL && slot < ring->guard->count) {
		ring->guard->slots[slot].memtype = memtype;
	}
}

uint32_t velo_ucx_guard_inflight(velo_ucx_ring_t *ring, uint32_t slot)
{
	if (ring->guard == NULL || slot >= ring->guard->count) {
		return 0;
	}
	return ring->guard->slots[slot].inflight;
}

void velo_ucx_guard_release(velo_ucx_ring_t *ring, uint32_t slot)
{
	struct velo_ucx_guard *guard = ring->guard;

	if (guard == NULL || slot >= guard->count || guard->slots[slot].state == GUARD_FREE) {
		return;
	}
	memset(&guard->slots[slot], 0, sizeof(guard->slots[slot]));
	guard->free_list[guard->nfree++] = slot;
}

/* ---------------------------------------------------------------- UCM options
 *
 * UCX_MEM_EVENTS belongs to UCM's global options, which libucs parses in its library
 * constructor, before a Go program's main runs: setting the variable from Go is too late
 * for this process. ucm_set_global_opts is UCM's own way to change them afterwards. */

int velo_ucx_ucm_events_enabled(void)
{
	return ucm_global_opts.enable_events;
}

void velo_ucx_ucm_set_events(int enable)
{
	ucm_global_config_t opts = ucm_global_opts;
	opts.enable_events       = enable;
	ucm_set_global_opts(&opts);
}

/* ---------------------------------------------------------------- fault signals
 *
 * libucs installs handlers for SIGILL, SIGSEGV, SIGBUS and SIGFPE in its library constructor
 * (UCX_HANDLE_ERRORS=bt by default), before the Go runtime starts. Go then keeps UCX's handler as
 * the one to forward faults in C code to, and what happens next depends on who restores which
 * handler when: a process that faulted inside UCX has been seen to report the fault and exit with
 * status 0, so a supervisor never restarted it. A Go program should crash like a Go program. So,
 * unless the user set UCX_HANDLE_ERRORS, this constructor hands the fault signals back before the
 * Go runtime installs its own: a fault in C code then gets Go's report (every goroutine, the C
 * program counter) and exit status 2, or death by the signal on a thread Go does not know.
 *
 * It runs after libucs's constructor when UCX is a shared library (a library is initialised before
 * the program that needs it), and may run before it in a static link; the variable it sets covers
 * that order, since libucs reads it when it initialises. */

int ucs_debug_is_error_signal(int signum); /* exported by libucs, absent from its public headers */

static int fault_signals_yielded = -1; /* -1: the user set UCX_HANDLE_ERRORS */

__attribute__((constructor)) static void velo_ucx_yield_fault_signals(void)
{
	static const int signals[] = {SIGILL, SIGSEGV, SIGBUS, SIGFPE};
	unsigned i;

	if (getenv("UCX_HANDLE_ERRORS") != NULL) {
		return;
	}
	setenv("UCX_HANDLE_ERRORS", "none", 0);
	fault_signals_yielded = 0;
	for (i = 0; i < sizeof(signals) / sizeof(signals[0]); i++) {
		if (ucs_debug_is_error_signal(signals[i])) {
			ucs_debug_disable_signal(signals[i]);
			fault_signals_yielded++;
		}
	}
}

int velo_ucx_fault_signals_yielded(void)
{
	return fault_signals_yielded;
}

/* ---------------------------------------------------------------- resource query */

typedef struct {
	velo_ucx_resource_t *items;
	size_t               count, cap;
} res_list_t;

static velo_ucx_resource_t *res_push(res_list_t *list)
{
	void *grown;
	if (list->count == list->cap) {
		size_t ncap = list->cap ? list->cap * 2 : 16;
		grown = realloc(list->items, ncap * sizeof(*list->items));
		if (grown == NULL) {
			return NULL;
		}
		list->items = grown;
		list->cap   = ncap;
	}
	memset(&list->items[list->count], 0, sizeof(list->items[0]));
	return &list->items[list->count++];
}

static void query_iface(uct_md_h md, uct_worker_h worker, const uct_tl_resource_desc_t *tl,
                        velo_ucx_resource_t *res)
{
	uct_iface_config_t *config;
	uct_iface_params_t params;
	uct_iface_attr_t attr;
	uct_iface_h iface;
	ucs_status_t status;

	status = uct_md_iface_config_read(md, tl->tl_name, NULL, NULL, &config);
	if (status != UCS_OK) {
		res->iface_status = status;
		return;
	}
	memset(&params, 0, sizeof(params));
	params.field_mask = UCT_IFACE_PARAM_FIELD_OPEN_MODE | UCT_IFACE_PARAM_FIELD_DEVICE |
	                    UCT_IFACE_PARAM_FIELD_STATS_ROOT | UCT_IFACE_PARAM_FIELD_RX_HEADROOM |
	                    UCT_IFACE_PARAM_FIELD_CPU_MASK;
	params.open_mode            = UCT_IFACE_OPEN_MODE_DEVICE;
	params.mode.device.tl_name  = tl->tl_name;
	params.mode.device.dev_name = tl->dev_name;
	params.stats_root           = NULL;
	params.rx_headroom          = 0;
	UCS_CPU_ZERO(&params.cpu_mask);
	status = uct_iface_open(md, worker, &params, config, &iface);
	uct_config_release(config);
	res->iface_status = status;
	if (status != UCS_OK) {
		return;
	}
	status = uct_iface_query(iface, &attr);
	if (status == UCS_OK) {
		res->iface_flags   = attr.cap.flags;
		res->put_max_short = attr.cap.put.max_short;
		res->put_max_bcopy = attr.cap.put.max_bcopy;
		res->put_max_zcopy = attr.cap.put.max_zcopy;
		res->get_max_short = attr.cap.get.max_short;
		res->get_max_bcopy = attr.cap.get.max_bcopy;
		res->get_max_zcopy = attr.cap.get.max_zcopy;
		res->am_max_short  = attr.cap.am.max_short;
		res->am_max_bcopy  = attr.cap.am.max_bcopy;
		res->am_max_zcopy  = attr.cap.am.max_zcopy;
		res->am_max_hdr    = attr.cap.am.max_hdr;
		res->latency_c     = attr.latency.c;
		res->bw_dedicated  = attr.bandwidth.dedicated;
		res->bw_shared     = attr.bandwidth.shared;
		res->overhead      = attr.overhead;
		res->max_num_eps   = attr.max_num_eps;
		res->priority      = attr.priority;
	} else {
		res->iface_status = status;
	}
	uct_iface_close(iface);
}

static void query_md(uct_component_h component, const uct_component_attr_t *cattr,
                     const char *md_name, uct_worker_h worker, res_list_t *list)
{
	uct_md_config_t *config;
	uct_tl_resource_desc_t *tls = NULL;
	unsigned num_tls = 0, i;
	velo_ucx_resource_t base, *res;
	uct_md_attr_t md_attr;
	ucs_status_t status;
	uct_md_h md;

	memset(&base, 0, sizeof(base));
	snprintf(base.component, sizeof(base.component), "%s", cattr->name);
	base.component_flags = cattr->flags;
	snprintf(base.md, sizeof(base.md), "%s", md_name);

	status = uct_md_config_read(component, NULL, NULL, &config);
	if (status == UCS_OK) {
		status = uct_md_open(component, md_name, config, &md);
		uct_config_release(config);
	}
	base.md_status = status;
	if (status != UCS_OK) {
		if ((res = res_push(list)) != NULL) {
			*res = base;
		}
		return;
	}
	if (uct_md_query(md, &md_attr) == UCS_OK) {
		base.md_flags         = md_attr.cap.flags;
		base.rkey_packed_size = md_attr.rkey_packed_size;
		base.reg_cost_c       = md_attr.reg_cost.c;
		base.reg_cost_m       = md_attr.reg_cost.m;
	}
	if (uct_md_query_tl_resources(md, &tls, &num_tls) != UCS_OK) {
		num_tls = 0;
	}
	if (num_tls == 0) {
		if ((res = res_push(list)) != NULL) {
			*res = base;
		}
	}
	for (i = 0; i < num_tls; i++) {
		res = res_push(list);
		if (res == NULL) {
			break;
		}
		*res = base;
		snprintf(res->tl, sizeof(res->tl), "%s", tls[i].tl_name);
		snprintf(res->dev, sizeof(res->dev), "%s", tls[i].dev_name);
		res->dev_type = tls[i].dev_type;
		res->sys_dev  = tls[i].sys_device;
		query_iface(md, worker, &tls[i], res);
	}
	if (tls != NULL) {
		uct_release_tl_resource_list(tls);
	}
	uct_md_close(md);
}

ucs_status_t velo_ucx_query_resources(velo_ucx_resource_t **out, size_t *count)
{
	uct_component_h *components = NULL;
	unsigned num_components = 0, c, m;
	uct_component_attr_t cattr;
	ucs_async_context_t *async = NULL;
	uct_worker_h worker        = NULL;
	res_list_t list            = {0};
	ucs_status_t status;

	status = uct_query_components(&components, &num_components);
	if (status != UCS_OK) {
		return status;
	}
	status = ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK, &async);
	if (status != UCS_OK) {
		goto out;
	}
	status = uct_worker_create(async, UCS_THREAD_MODE_SINGLE, &worker);
	if (status != UCS_OK) {
		goto out;
	}
	for (c = 0; c < num_components; c++) {
		memset(&cattr, 0, sizeof(cattr));
		cattr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME |
		                   UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT |
		                   UCT_COMPONENT_ATTR_FIELD_FLAGS;
		if (uct_component_query(components[c], &cattr) != UCS_OK) {
			continue;
		}
		cattr.md_resources = calloc(cattr.md_resource_count + 1, sizeof(uct_md_resource_desc_t));
		if (cattr.md_resources == NULL) {
			status = UCS_ERR_NO_MEMORY;
			goto out;
		}
		cattr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
		if (uct_component_query(components[c], &cattr) == UCS_OK) {
			if (cattr.md_resource_count == 0) {
				/* A component with no memory domain (no device): still report it. */
				velo_ucx_resource_t *res = res_push(&list);
				if (res != NULL) {
					snprintf(res->component, sizeof(res->component), "%s", cattr.name);
					res->component_flags = cattr.flags;
					res->md_status       = UCS_ERR_NO_DEVICE;
				}
			}
			for (m = 0; m < cattr.md_resource_count; m++) {
				query_md(components[c], &cattr, cattr.md_resources[m].md_name, worker, &list);
			}
		}
		free(cattr.md_resources);
	}
	status = UCS_OK;
out:
	if (worker != NULL) {
		uct_worker_destroy(worker);
	}
	if (async != NULL) {
		ucs_async_context_destroy(async);
	}
	uct_release_component_list(components);
	if (status != UCS_OK) {
		free(list.items);
		return status;
	}
	*out   = list.items;
	*count = list.count;
	return UCS_OK;
}

typedef struct {
	const char *name;
	int         found;
} sym_search_t;

static int sym_visit(struct dl_phdr_info *info, size_t size, void *arg)
{
	sym_search_t *search = arg;
	const char *path     = info->dlpi_name;
	void *handle;

	if (search->found) {
		return 1;
	}
	/* The main program has an empty name; dlopen(NULL) searches it and the global scope. */
	handle = dlopen((path != NULL && path[0] != '\0') ? path : NULL, RTLD_LAZY | RTLD_NOLOAD);
	if (handle == NULL) {
		return 0;
	}
	if (dlsym(handle, search->name) != NULL) {
		search->found = 1;
	}
	dlclose(handle);
	return search->found;
}

int velo_ucx_symbol_loaded(const char *name)
{
	sym_search_t search = {name, 0};
	dl_iterate_phdr(sym_visit, &search);
	return search.found;
}

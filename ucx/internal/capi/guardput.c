//go:build cgo && linux

/* ---------------------------------------------------------------- guarded PUT
 *
 * The write twin of the guarded GET (capi.c). Over transports without hardware RMA, UCX would
 * emulate a PUT by writing wherever the request says; velo's UCX refuses that emulation outright
 * (third_party/ucx/patches), so a write over tcp needs a protocol of its own in which the target
 * decides. The writer sends one active message: a header naming the registration (slot, token),
 * the target address and the length, followed by exactly that many bytes, sent eagerly. Here,
 * inside the target's progress, the request is checked against the table of live registrations
 * (capi_private.h): the slot is live, its token matches, it was registered with write access, and
 * the whole range lies inside it. Only then are the bytes copied into place, and the answer goes
 * back on the reply endpoint before this callback returns (UCX guarantees that endpoint only
 * here). Anything else writes nothing and is answered with an error status, counted by reason,
 * and the last refusal is kept for the engine's rate-limited log line.
 *
 * The copy happens inside the callback, so no reply is in flight that reads or writes the
 * registration afterwards, and an unregistration that revoked the slot (under the same lock that
 * progresses the worker) is seen by every later request. A request whose data came by
 * rendezvous is refused: its bytes would have to be received after the callback, into memory
 * whose registration may be gone by then, and the answer could only be sent after the callback
 * too. Writers therefore cut large puts into eager pieces (package ucx does). */

#define _GNU_SOURCE
#include "capi.h"
#include "capi_private.h"

#include <stdlib.h>
#include <string.h>

struct velo_ucx_gput {
	uint32_t              rep_id;
	velo_ucx_gput_stats_t stats;
};

typedef struct {
	velo_ucx_put_rep_hdr_t hdr; /* must stay valid until the send completes */
} gput_reply_t;

static void gput_reply_cb(void *request, ucs_status_t status, void *user_data)
{
	(void)status;
	free(user_data);
	ucp_request_free(request);
}

static int32_t gput_refuse(struct velo_ucx_gput *g, int reason, const velo_ucx_put_req_hdr_t *req,
                           int32_t status)
{
	g->stats.refused[reason]++;
	g->stats.last_reason = reason;
	if (req != NULL) {
		g->stats.last_slot    = req->slot;
		g->stats.last_address = req->address;
		g->stats.last_length  = req->length;
	} else {
		g->stats.last_slot    = UINT32_MAX;
		g->stats.last_address = 0;
		g->stats.last_length  = 0;
	}
	return status;
}

/* gput_check decides one request: UCS_OK with the bytes copied in place, or the refusal. */
static int32_t gput_check(velo_ucx_ring_t *ring, const velo_ucx_put_req_hdr_t *req,
                          const void *data, size_t length, uint64_t recv_attr)
{
	struct velo_ucx_gput *g      = ring->gput;
	struct velo_ucx_guard *guard = ring->guard;
	guard_slot_t *slot;

	if (req->magic != VELO_UCX_GUARDPUT_MAGIC || (recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) ||
	    req->length != (uint64_t)length || (length > 0 && data == NULL)) {
		return gput_refuse(g, VELO_UCX_PUT_REFUSED_MALFORMED, req, UCS_ERR_MESSAGE_TRUNCATED);
	}
	if (guard == NULL || req->slot >= guard->count) {
		return gput_refuse(g, VELO_UCX_PUT_REFUSED_REVOKED, req, UCS_ERR_REJECTED);
	}
	slot = &guard->slots[req->slot];
	if (slot->state != GUARD_LIVE || slot->token != req->token) {
		return gput_refuse(g, VELO_UCX_PUT_REFUSED_REVOKED, req, UCS_ERR_REJECTED);
	}
	if (!(slot->access & VELO_UCX_ACCESS_WRITE)) {
		return gput_refuse(g, VELO_UCX_PUT_REFUSED_READONLY, req, UCS_ERR_UNSUPPORTED);
	}
	if (req->address < slot->base || req->length > slot->length ||
	    req->address - slot->base > slot->length - req->length) {
		return gput_refuse(g, VELO_UCX_PUT_REFUSED_RANGE, req, UCS_ERR_INVALID_ADDR);
	}
	if (length > 0 && slot->memtype > UCS_MEMORY_TYPE_HOST) {
		/* Device memory: the bytes go through the CUDA driver (a build without CUDA has no
		 * such registration, and answers with the refusal below if one ever appears). */
		if (velo_cuda_copy(req->address, (uint64_t)(uintptr_t)data, length) != 0) {
			return gput_refuse(g, VELO_UCX_PUT_REFUSED_MALFORMED, req, UCS_ERR_UNSUPPORTED);
		}
	} else if (length > 0) {
		memcpy((void*)(uintptr_t)req->address, data, length);
	}
	g->stats.served++;
	g->stats.served_bytes += length;
	return UCS_OK;
}

static ucs_status_t gput_req_cb(void *arg, const void *header, size_t header_length, void *data,
                                size_t length, const ucp_am_recv_param_t *param)
{
	struct velo_ucx_am_slot *amslot = arg;
	velo_ucx_ring_t *ring;
	velo_ucx_put_req_hdr_t req;
	ucp_request_param_t rp;
	gput_reply_t *reply;
	int32_t status;
	void *ptr;

	ring = amslot->ring;
	if (ring->gput == NULL) {
		return UCS_OK;
	}
	if (header_length != sizeof(req) || !(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)) {
		/* Not ours, or no way to answer: nothing is written either way. */
		gput_refuse(ring->gput, VELO_UCX_PUT_REFUSED_MALFORMED, NULL, UCS_ERR_MESSAGE_TRUNCATED);
		return UCS_OK;
	}
	memcpy(&req, header, sizeof(req));
	status = gput_check(ring, &req, data, length, param->recv_attr);

	reply = calloc(1, sizeof(*reply));
	if (reply == NULL) {
		return UCS_OK; /* the writer's wait ends with its deadline or the endpoint */
	}
	reply->hdr.req_id = req.req_id;
	reply->hdr.status = status;
	reply->hdr.magic  = VELO_UCX_GUARDPUT_MAGIC;
	memset(&rp, 0, sizeof(rp));
	rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
	rp.cb.send      = gput_reply_cb;
	rp.user_data    = reply;
	ptr = ucp_am_send_nbx(param->reply_ep, ring->gput->rep_id, &reply->hdr, sizeof(reply->hdr),
	                      NULL, 0, &rp);
	if (!UCS_PTR_IS_PTR(ptr)) {
		free(reply); /* sent at once, or failed: the callback will not run */
	}
	/* The data (eager: copied above or refused; rendezvous: never received) is UCX's to free. */
	return UCS_OK;
}

ucs_status_t velo_ucx_guardput_enable(velo_ucx_ring_t *ring, unsigned req_id, unsigned rep_id)
{
	if (ring->guard == NULL) {
		return UCS_ERR_INVALID_PARAM; /* velo_ucx_guard_enable first: the table is the GET's */
	}
	if (ring->gput == NULL) {
		ring->gput = calloc(1, sizeof(*ring->gput));
		if (ring->gput == NULL) {
			return UCS_ERR_NO_MEMORY;
		}
		ring->gput->stats.last_reason = -1;
	}
	ring->gput->rep_id = rep_id;
	return velo_ucx_set_handler_cb(ring, req_id, gput_req_cb);
}

void velo_ucx_guardput_stats(velo_ucx_ring_t *ring, velo_ucx_gput_stats_t *out)
{
	memset(out, 0, sizeof(*out));
	out->last_reason = -1;
	if (ring->gput != NULL) {
		*out = ring->gput->stats;
	}
}

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
 * too. Writers therefore cut large puts into eager pieces (package ucx does).
 *
 * The vectored request carries many small writes in one message, each naming its own registration
 * (the entry of the vectored GET) and checked exactly as a single request is; one answer carries a
 * status per write. It exists for batches of small writes, where a request and its answer per
 * write cost more than the bytes. */

#define _GNU_SOURCE
#include "capi.h"
#include "capi_private.h"

#include <stdlib.h>
#include <string.h>

struct velo_ucx_gput {
	uint32_t rep_id, vrep_id;
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

static int32_t gput_refuse(velo_ucx_ring_t *ring, int reason, uint32_t slot, uint64_t address,
                           uint64_t length, int32_t status)
{
	velo_ucx_gput_stats_t *st = &ring->gput_stats;

	st->refused[reason]++;
	st->last_reason  = reason;
	st->last_slot    = slot;
	st->last_address = address;
	st->last_length  = length;
	return status;
}

/* gput_write decides one write whose bytes arrived whole: UCS_OK with them copied in place, or the
 * refusal. The single and the vectored request both come here, so a write is checked the same way
 * whichever carried it. */
static int32_t gput_write(velo_ucx_ring_t *ring, ucp_ep_h ep, uint32_t slot_id, uint64_t token,
                          uint64_t address, uint64_t length, const void *data)
{
	struct velo_ucx_guard *guard = ring->guard;
	guard_slot_t *slot;
	ucs_status_t status;

	if (guard == NULL || slot_id >= guard->count) {
		return gput_refuse(ring, VELO_UCX_PUT_REFUSED_REVOKED, slot_id, address, length, UCS_ERR_REJECTED);
	}
	slot = &guard->slots[slot_id];
	if (slot->state != GUARD_LIVE || slot->token != token) {
		return gput_refuse(ring, VELO_UCX_PUT_REFUSED_REVOKED, slot_id, address, length, UCS_ERR_REJECTED);
	}
	if (!(slot->access & VELO_UCX_ACCESS_WRITE)) {
		return gput_refuse(ring, VELO_UCX_PUT_REFUSED_READONLY, slot_id, address, length, UCS_ERR_UNSUPPORTED);
	}
	status = velo_ucx_guard_holder_check(ring, slot, ep);
	if (status != UCS_OK) {
		return gput_refuse(ring, VELO_UCX_PUT_REFUSED_HOLDER, slot_id, address, length, status);
	}
	if (address < slot->base || length > slot->length || address - slot->base > slot->length - length) {
		return gput_refuse(ring, VELO_UCX_PUT_REFUSED_RANGE, slot_id, address, length, UCS_ERR_INVALID_ADDR);
	}
	if (length > 0 && slot->memtype > UCS_MEMORY_TYPE_HOST) {
		/* Device memory: the bytes go through the CUDA driver (a build without CUDA has no
		 * such registration, and answers with the refusal below if one ever appears). */
		if (velo_cuda_copy(address, (uint64_t)(uintptr_t)data, length) != 0) {
			return gput_refuse(ring, VELO_UCX_PUT_REFUSED_MALFORMED, slot_id, address, length, UCS_ERR_UNSUPPORTED);
		}
	} else if (length > 0) {
		memcpy((void*)(uintptr_t)address, data, length);
	}
	ring->gput_stats.served++;
	ring->gput_stats.served_bytes += length;
	return UCS_OK;
}

/* gput_check decides one single request. */
static int32_t gput_check(velo_ucx_ring_t *ring, ucp_ep_h ep, const velo_ucx_put_req_hdr_t *req,
                          const void *data, size_t length, uint64_t recv_attr)
{
	if (req->magic != VELO_UCX_GUARDPUT_MAGIC || (recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) ||
	    req->length != (uint64_t)length || (length > 0 && data == NULL)) {
		return gput_refuse(ring, VELO_UCX_PUT_REFUSED_MALFORMED, req->slot, req->address,
		                   req->length, UCS_ERR_MESSAGE_TRUNCATED);
	}
	return gput_write(ring, ep, req->slot, req->token, req->address, req->length, data);
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
		gput_refuse(ring, VELO_UCX_PUT_REFUSED_MALFORMED, UINT32_MAX, 0, 0, UCS_ERR_MESSAGE_TRUNCATED);
		return UCS_OK;
	}
	memcpy(&req, header, sizeof(req));
	status = gput_check(ring, param->reply_ep, &req, data, length, param->recv_attr);

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

/* The vectored request: a header, count entries (slot, token, address, length), and the writes'
 * bytes back to back as the data. A header that does not parse (wrong magic, a count out of
 * bounds, a header length that does not match the count) is dropped and counted: an answer needs
 * a count the writer can match. Data that is not exactly the entries' bytes, or came by
 * rendezvous, writes nothing and is answered malformed for every entry; otherwise each entry is
 * decided on its own by gput_write, and the answer carries a status per entry. */
static ucs_status_t gputv_req_cb(void *arg, const void *header, size_t header_length, void *data,
                                 size_t length, const ucp_am_recv_param_t *param)
{
	struct velo_ucx_am_slot *amslot = arg;
	velo_ucx_ring_t *ring           = amslot->ring;
	velo_ucx_putv_req_hdr_t req;
	velo_ucx_putv_rep_hdr_t rep;
	velo_ucx_getv_entry_t e;
	ucp_request_param_t rp;
	uint8_t *reply;
	uint64_t total = 0;
	size_t off = 0, reply_len;
	uint32_t i;
	int whole;
	int32_t status;
	void *ptr;

	if (ring->gput == NULL) {
		return UCS_OK;
	}
	if (header_length < sizeof(req) || !(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)) {
		gput_refuse(ring, VELO_UCX_PUT_REFUSED_MALFORMED, UINT32_MAX, 0, 0, UCS_ERR_MESSAGE_TRUNCATED);
		return UCS_OK;
	}
	memcpy(&req, header, sizeof(req));
	if (req.magic != VELO_UCX_GUARDPUTV_MAGIC || req.count == 0 || req.count > VELO_UCX_GUARDPUTV_MAX ||
	    header_length != sizeof(req) + (size_t)req.count * sizeof(e)) {
		gput_refuse(ring, VELO_UCX_PUT_REFUSED_MALFORMED, UINT32_MAX, 0, 0, UCS_ERR_MESSAGE_TRUNCATED);
		return UCS_OK;
	}
	/* The data must be exactly the entries' bytes (no entry's length can wrap the sum: each is
	 * checked against the data's own length first). */
	whole = !(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) && (length == 0 || data != NULL);
	for (i = 0; whole && i < req.count; i++) {
		memcpy(&e, (const uint8_t*)header + sizeof(req) + i * sizeof(e), sizeof(e));
		if (e.length > (uint64_t)length - total) {
			whole = 0;
		} else {
			total += e.length;
		}
	}
	whole = whole && total == (uint64_t)length;

	reply_len = sizeof(rep) + req.count * sizeof(int32_t);
	reply     = calloc(1, reply_len);
	for (i = 0; i < req.count; i++) {
		memcpy(&e, (const uint8_t*)header + sizeof(req) + i * sizeof(e), sizeof(e));
		if (whole) {
			status = gput_write(ring, param->reply_ep, e.slot, e.token, e.address, e.length, (const uint8_t*)data + off);
			off += e.length;
		} else {
			status = gput_refuse(ring, VELO_UCX_PUT_REFUSED_MALFORMED, e.slot, e.address,
			                     e.length, UCS_ERR_MESSAGE_TRUNCATED);
		}
		if (reply != NULL) {
			memcpy(reply + sizeof(rep) + i * sizeof(int32_t), &status, sizeof(status));
		}
	}
	if (reply == NULL) {
		return UCS_OK; /* the writer's wait ends with its deadline or the endpoint */
	}
	rep.req_id = req.req_id;
	rep.magic  = VELO_UCX_GUARDPUTV_MAGIC;
	rep.count  = req.count;
	memcpy(reply, &rep, sizeof(rep));
	memset(&rp, 0, sizeof(rp));
	rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
	rp.cb.send      = gput_reply_cb;
	rp.user_data    = reply;
	ptr = ucp_am_send_nbx(param->reply_ep, ring->gput->vrep_id, reply, reply_len, NULL, 0, &rp);
	if (!UCS_PTR_IS_PTR(ptr)) {
		free(reply);
	}
	return UCS_OK;
}

ucs_status_t velo_ucx_guardput_enable(velo_ucx_ring_t *ring, unsigned req_id, unsigned rep_id,
                                      unsigned vreq_id, unsigned vrep_id)
{
	ucs_status_t status;

	if (ring->guard == NULL) {
		return UCS_ERR_INVALID_PARAM; /* velo_ucx_guard_enable first: the table is the GET's */
	}
	if (ring->gput == NULL) {
		ring->gput = calloc(1, sizeof(*ring->gput));
		if (ring->gput == NULL) {
			return UCS_ERR_NO_MEMORY;
		}
	}
	ring->gput->rep_id  = rep_id;
	ring->gput->vrep_id = vrep_id;
	status = velo_ucx_set_handler_cb(ring, req_id, gput_req_cb);
	if (status != UCS_OK) {
		return status;
	}
	return velo_ucx_set_handler_cb(ring, vreq_id, gputv_req_cb);
}


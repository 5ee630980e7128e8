//go:build cgo && linux && ucx_cbbench

// Measurement only (build tag ucx_cbbench): an AM handler that calls into Go once per
// message, the alternative to the event ring. `make bench-ucx-delivery` compares both.

#include "capi.h"
#include "_cgo_export.h"

#include <string.h>

static ucs_status_t gocb_am(void *arg, const void *header, size_t header_length, void *data,
                            size_t length, const ucp_am_recv_param_t *param)
{
	veloGoAMCallback((uintptr_t)arg, (void*)header, header_length, data, length);
	return UCS_OK;
}

ucs_status_t velo_ucx_set_am_handler_gocb(ucp_worker_h worker, unsigned id, uintptr_t arg)
{
	ucp_am_handler_param_t param;

	memset(&param, 0, sizeof(param));
	param.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
	                   UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
	param.id    = id;
	param.flags = UCP_AM_FLAG_WHOLE_MSG;
	param.cb    = gocb_am;
	param.arg   = (void*)arg;
	return ucp_worker_set_am_recv_handler(worker, &param);
}

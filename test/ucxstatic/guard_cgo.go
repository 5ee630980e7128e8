//go:build cgo && linux && ucx_static

package ucxstatic

// The probes of velo's UCX patch set (third_party/ucx/patches): its marker and counters, a
// software PUT, GET and atomics at a global of this process through a live worker, and a tcp PUT
// at another. The library and include path come from static_cgo.go (cgo flags are per package).

// #include <stdint.h>
// #include <stdlib.h>
// #include <string.h>
// #include <ucp/api/ucp.h>
// #include <uct/api/uct.h>
// #include <ucs/async/async_fwd.h>
// #include <ucs/config/global_opts.h>
//
// // The target memory of the probes: globals of this process, which the probes' target worker
// // or interface belongs to, so that a write or read there is one an attacker would make.
// static volatile uint64_t velo_guard_rma_target = 0x1122334455667788ull;
// static volatile uint64_t velo_guard_tcp_target = 0x8877665544332211ull;
//
// static uint64_t velo_guard_rma_target_value(void) { return velo_guard_rma_target; }
// static uint64_t velo_guard_tcp_target_value(void) { return velo_guard_tcp_target; }
//
// static void velo_guard_counters(uint64_t *out) { velo_ucx_guard_counters(out, 5); }
//
// typedef struct {
//     int put, put_flush, get, amo_post, amo_flush, amo_fetch, am; // ucs_status_t of each step
//     uint64_t get_buf, amo_fetch_buf;                             // what the refused reads delivered
//     const char *failed;                                          // the setup call that failed
// } velo_guard_rma_report_t;
//
// typedef struct { int done; ucs_status_t status; } velo_guard_req_t;
//
// static void velo_guard_send_cb(void *req, ucs_status_t status, void *user)
// {
//     velo_guard_req_t *r = user;
//     r->done   = 1;
//     r->status = status;
// }
//
// // Progresses both workers until the operation completes, for up to about a minute of spinning.
// static ucs_status_t velo_guard_wait(ucp_worker_h a, ucp_worker_h b, ucs_status_ptr_t sp,
//                                     velo_guard_req_t *r)
// {
//     long i;
//     if (sp == NULL) return UCS_OK;
//     if (UCS_PTR_IS_ERR(sp)) return UCS_PTR_STATUS(sp);
//     for (i = 0; (i < 50000000) && !r->done; i++) {
//         ucp_worker_progress(a);
//         ucp_worker_progress(b);
//     }
//     if (!r->done) {
//         ucp_request_cancel(a, sp);
//         return UCS_ERR_TIMED_OUT; // the request is left to the worker's destruction
//     }
//     ucp_request_free(sp);
//     return r->status;
// }
//
// static ucs_status_t velo_guard_am_cb(void *arg, const void *header, size_t header_length,
//                                      void *data, size_t length, const ucp_am_recv_param_t *param)
// {
//     *(size_t*)arg = length;
//     return UCS_OK;
// }
//
// // Two workers of this process, connected over the configured transports (UCX_TLS, else tcp):
// // the requester puts, gets and runs atomics at a global of the process through the target's
// // remote key, then sends an active message of am_bytes (0: none) to show the endpoint still works.
// static int velo_guard_rma_probe(velo_guard_rma_report_t *rep, size_t am_bytes)
// {
//     ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES,
//                            .features   = UCP_FEATURE_RMA | UCP_FEATURE_AMO32 |
//                                          UCP_FEATURE_AMO64 | UCP_FEATURE_AM};
//     ucp_worker_params_t wp = {.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
//                               .thread_mode = UCS_THREAD_MODE_SINGLE};
//     uint64_t region[8], src = 0xdeadbeefdeadbeefull, one = 1;
//     ucp_mem_map_params_t mp = {.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
//                                              UCP_MEM_MAP_PARAM_FIELD_LENGTH,
//                                .address = region, .length = sizeof(region)};
//     uint64_t target = (uint64_t)(uintptr_t)&velo_guard_rma_target;
//     ucp_config_t *cfg = NULL;
//     ucp_context_h ca = NULL, cb = NULL;
//     ucp_worker_h wa = NULL, wb = NULL;
//     ucp_address_t *addr = NULL;
//     size_t addr_len, am_got = 0, rkey_len;
//     ucp_ep_h ep = NULL;
//     ucp_mem_h memh = NULL;
//     void *rkey_buf = NULL;
//     ucp_rkey_h rkey = NULL;
//     ucp_ep_params_t ep_params;
//     ucp_request_param_t rp;
//     velo_guard_req_t r;
//     char *am_buf = NULL;
//     int ret = -1;
//     long i;
//
//     memset(rep, 0, sizeof(*rep));
// #define VELO_GUARD_FAIL(_what) do { rep->failed = _what; goto out; } while (0)
//     if (ucp_config_read(NULL, NULL, &cfg) != UCS_OK) VELO_GUARD_FAIL("ucp_config_read");
//     if ((getenv("UCX_TLS") == NULL) && (ucp_config_modify(cfg, "TLS", "tcp") != UCS_OK))
//         VELO_GUARD_FAIL("ucp_config_modify(TLS)");
//     if (ucp_init(&params, cfg, &ca) != UCS_OK) VELO_GUARD_FAIL("ucp_init (requester)");
//     if (ucp_init(&params, cfg, &cb) != UCS_OK) VELO_GUARD_FAIL("ucp_init (target)");
//     if (ucp_worker_create(ca, &wp, &wa) != UCS_OK) VELO_GUARD_FAIL("ucp_worker_create (requester)");
//     if (ucp_worker_create(cb, &wp, &wb) != UCS_OK) VELO_GUARD_FAIL("ucp_worker_create (target)");
//     {
//         ucp_am_handler_param_t hp = {.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
//                                                    UCP_AM_HANDLER_PARAM_FIELD_CB |
//                                                    UCP_AM_HANDLER_PARAM_FIELD_ARG,
//                                      .id = 7, .cb = velo_guard_am_cb, .arg = &am_got};
//         if (ucp_worker_set_am_recv_handler(wb, &hp) != UCS_OK)
//             VELO_GUARD_FAIL("ucp_worker_set_am_recv_handler");
//     }
//     if (ucp_worker_get_address(wb, &addr, &addr_len) != UCS_OK) VELO_GUARD_FAIL("ucp_worker_get_address");
//     memset(&ep_params, 0, sizeof(ep_params));
//     ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
//     ep_params.address    = addr;
//     if (ucp_ep_create(wa, &ep_params, &ep) != UCS_OK) VELO_GUARD_FAIL("ucp_ep_create");
//     if (ucp_mem_map(cb, &mp, &memh) != UCS_OK) VELO_GUARD_FAIL("ucp_mem_map");
//     if (ucp_rkey_pack(cb, memh, &rkey_buf, &rkey_len) != UCS_OK) VELO_GUARD_FAIL("ucp_rkey_pack");
//     if (ucp_ep_rkey_unpack(ep, rkey_buf, &rkey) != UCS_OK) VELO_GUARD_FAIL("ucp_ep_rkey_unpack");
//
//     memset(&rp, 0, sizeof(rp));
//     rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
//     rp.cb.send      = velo_guard_send_cb;
//     rp.user_data    = &r;
//
//     memset(&r, 0, sizeof(r));
//     rep->put = velo_guard_wait(wa, wb, ucp_put_nbx(ep, &src, sizeof(src), target, rkey, &rp), &r);
//     memset(&r, 0, sizeof(r));
//     rep->put_flush = velo_guard_wait(wa, wb, ucp_ep_flush_nbx(ep, &rp), &r);
//     memset(&r, 0, sizeof(r));
//     rep->get = velo_guard_wait(wa, wb, ucp_get_nbx(ep, &rep->get_buf, sizeof(rep->get_buf),
//                                                    target, rkey, &rp), &r);
//
//     rp.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
//     rp.datatype      = ucp_dt_make_contig(sizeof(uint64_t));
//     memset(&r, 0, sizeof(r));
//     rep->amo_post = velo_guard_wait(wa, wb, ucp_atomic_op_nbx(ep, UCP_ATOMIC_OP_ADD, &one, 1,
//                                                               target, rkey, &rp), &r);
//     memset(&r, 0, sizeof(r));
//     rep->amo_flush = velo_guard_wait(wa, wb, ucp_ep_flush_nbx(ep, &rp), &r);
//     rp.op_attr_mask |= UCP_OP_ATTR_FIELD_REPLY_BUFFER;
//     rp.reply_buffer  = &rep->amo_fetch_buf;
//     memset(&r, 0, sizeof(r));
//     rep->amo_fetch = velo_guard_wait(wa, wb, ucp_atomic_op_nbx(ep, UCP_ATOMIC_OP_ADD, &one, 1,
//                                                                target, rkey, &rp), &r);
//
//     if (am_bytes > 0) {
//         if ((am_buf = malloc(am_bytes)) == NULL) VELO_GUARD_FAIL("malloc");
//         memset(am_buf, 0x5a, am_bytes);
//         memset(&rp, 0, sizeof(rp));
//         rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
//         rp.cb.send      = velo_guard_send_cb;
//         rp.user_data    = &r;
//         memset(&r, 0, sizeof(r));
//         rep->am = velo_guard_wait(wa, wb, ucp_am_send_nbx(ep, 7, NULL, 0, am_buf, am_bytes, &rp), &r);
//         for (i = 0; (i < 10000000) && (am_got == 0); i++) {
//             ucp_worker_progress(wa);
//             ucp_worker_progress(wb);
//         }
//         if ((rep->am == UCS_OK) && (am_got != am_bytes)) rep->am = UCS_ERR_MESSAGE_TRUNCATED;
//     }
//     ret = 0;
// out:
//     free(am_buf);
//     if (rkey != NULL) ucp_rkey_destroy(rkey);
//     if (rkey_buf != NULL) ucp_rkey_buffer_release(rkey_buf);
//     if (memh != NULL) ucp_mem_unmap(cb, memh);
//     if (ep != NULL) {
//         ucp_request_param_t cp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
//                                   .flags        = UCP_EP_CLOSE_FLAG_FORCE};
//         ucs_status_ptr_t sp = ucp_ep_close_nbx(ep, &cp);
//         for (i = 0; (i < 1000000) && UCS_PTR_IS_PTR(sp) &&
//                     (ucp_request_check_status(sp) == UCS_INPROGRESS); i++) {
//             ucp_worker_progress(wa);
//             ucp_worker_progress(wb);
//         }
//         if (UCS_PTR_IS_PTR(sp)) ucp_request_free(sp);
//     }
//     if (addr != NULL) ucp_worker_release_address(wb, addr);
//     if (wa != NULL) ucp_worker_destroy(wa);
//     if (wb != NULL) ucp_worker_destroy(wb);
//     if (ca != NULL) ucp_cleanup(ca);
//     if (cb != NULL) ucp_cleanup(cb);
//     if (cfg != NULL) ucp_config_release(cfg);
//     return ret;
// }
//
// typedef struct {
//     int put;             // what uct_ep_put_zcopy returned
//     int sender_errors;   // error callbacks of the sending interface
//     const char *failed;  // the setup call that failed
// } velo_guard_tcp_report_t;
//
// static ucs_status_t velo_guard_tcp_err(void *arg, uct_ep_h ep, ucs_status_t status)
// {
//     ++*(int*)arg;
//     return UCS_OK;
// }
//
// static void velo_guard_tcp_comp(uct_completion_t *self) { }
//
// // Two tcp interfaces of this process on the loopback device: one sends a tcp PUT of 8 bytes
// // at a global of the process, which the other receives; waits until the receiver refused it
// // (counter [3]) and the sender saw its connection close, for up to about a minute of spinning.
// static int velo_guard_tcp_probe(velo_guard_tcp_report_t *rep)
// {
//     uct_component_h *comps = NULL, tcp = NULL;
//     unsigned ncomps, i;
//     ucs_async_context_t *async = NULL;
//     uct_worker_h worker = NULL;
//     uct_md_config_t *md_cfg = NULL;
//     uct_md_h md = NULL;
//     uct_iface_config_t *if_cfg = NULL;
//     uct_iface_h ifa = NULL, ifb = NULL;
//     uct_iface_attr_t attr;
//     uct_device_addr_t *dev = NULL;
//     uct_iface_addr_t *ifaddr = NULL;
//     uct_ep_h ep = NULL;
//     uct_iface_params_t ip;
//     uct_ep_params_t epp;
//     uct_iov_t iov;
//     uct_completion_t comp = {.func = velo_guard_tcp_comp, .count = 1, .status = UCS_OK};
//     uint64_t src = 0xfeedfacefeedfaceull, before[5], now[5];
//     int receiver_errors = 0, ret = -1;
//     long n;
//
//     memset(rep, 0, sizeof(*rep));
// #define VELO_GUARD_TFAIL(_what) do { rep->failed = _what; goto out; } while (0)
//     if (uct_query_components(&comps, &ncomps) != UCS_OK) VELO_GUARD_TFAIL("uct_query_components");
//     for (i = 0; i < ncomps; i++) {
//         uct_component_attr_t ca = {.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME};
//         if ((uct_component_query(comps[i], &ca) == UCS_OK) && !strcmp(ca.name, "tcp")) tcp = comps[i];
//     }
//     if (tcp == NULL) VELO_GUARD_TFAIL("no tcp component");
//     if (ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK, &async) != UCS_OK)
//         VELO_GUARD_TFAIL("ucs_async_context_create");
//     if (uct_worker_create(async, UCS_THREAD_MODE_SINGLE, &worker) != UCS_OK) VELO_GUARD_TFAIL("uct_worker_create");
//     if (uct_md_config_read(tcp, NULL, NULL, &md_cfg) != UCS_OK) VELO_GUARD_TFAIL("uct_md_config_read");
//     if (uct_md_open(tcp, "tcp", md_cfg, &md) != UCS_OK) VELO_GUARD_TFAIL("uct_md_open");
//     if (uct_md_iface_config_read(md, "tcp", NULL, NULL, &if_cfg) != UCS_OK)
//         VELO_GUARD_TFAIL("uct_md_iface_config_read");
//     memset(&ip, 0, sizeof(ip));
//     ip.field_mask           = UCT_IFACE_PARAM_FIELD_OPEN_MODE | UCT_IFACE_PARAM_FIELD_DEVICE |
//                               UCT_IFACE_PARAM_FIELD_ERR_HANDLER |
//                               UCT_IFACE_PARAM_FIELD_ERR_HANDLER_ARG |
//                               UCT_IFACE_PARAM_FIELD_ERR_HANDLER_FLAGS;
//     ip.open_mode            = UCT_IFACE_OPEN_MODE_DEVICE;
//     ip.mode.device.tl_name  = "tcp";
//     ip.mode.device.dev_name = "lo";
//     ip.err_handler          = velo_guard_tcp_err;
//     ip.err_handler_arg      = &rep->sender_errors;
//     if (uct_iface_open(md, worker, &ip, if_cfg, &ifa) != UCS_OK) VELO_GUARD_TFAIL("uct_iface_open (sender)");
//     ip.err_handler_arg = &receiver_errors;
//     if (uct_iface_open(md, worker, &ip, if_cfg, &ifb) != UCS_OK) VELO_GUARD_TFAIL("uct_iface_open (receiver)");
//     if (uct_iface_query(ifb, &attr) != UCS_OK) VELO_GUARD_TFAIL("uct_iface_query");
//     dev    = calloc(1, attr.device_addr_len + 1);
//     ifaddr = calloc(1, attr.iface_addr_len + 1);
//     if ((dev == NULL) || (ifaddr == NULL)) VELO_GUARD_TFAIL("calloc");
//     if (uct_iface_get_device_address(ifb, dev) != UCS_OK) VELO_GUARD_TFAIL("uct_iface_get_device_address");
//     if (uct_iface_get_address(ifb, ifaddr) != UCS_OK) VELO_GUARD_TFAIL("uct_iface_get_address");
//     uct_iface_progress_enable(ifa, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
//     uct_iface_progress_enable(ifb, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
//     memset(&epp, 0, sizeof(epp));
//     epp.field_mask = UCT_EP_PARAM_FIELD_IFACE | UCT_EP_PARAM_FIELD_DEV_ADDR |
//                      UCT_EP_PARAM_FIELD_IFACE_ADDR;
//     epp.iface      = ifa;
//     epp.dev_addr   = dev;
//     epp.iface_addr = ifaddr;
//     if (uct_ep_create(&epp, &ep) != UCS_OK) VELO_GUARD_TFAIL("uct_ep_create");
//
//     velo_ucx_guard_counters(before, 5);
//     iov.buffer = &src;
//     iov.length = sizeof(src);
//     iov.memh   = UCT_MEM_HANDLE_NULL;
//     iov.stride = 0;
//     iov.count  = 1;
//     for (n = 0; n < 50000000; n++) {
//         rep->put = uct_ep_put_zcopy(ep, &iov, 1, (uint64_t)(uintptr_t)&velo_guard_tcp_target, 0, &comp);
//         if (rep->put != UCS_ERR_NO_RESOURCE) break;
//         uct_worker_progress(worker);
//     }
//     for (n = 0; n < 50000000; n++) {
//         velo_ucx_guard_counters(now, 5);
//         if ((now[3] > before[3]) && (rep->sender_errors > 0)) break;
//         uct_worker_progress(worker);
//     }
//     ret = 0;
// out:
//     if (ep != NULL) uct_ep_destroy(ep);
//     if (ifa != NULL) uct_iface_close(ifa);
//     if (ifb != NULL) uct_iface_close(ifb);
//     free(dev);
//     free(ifaddr);
//     if (if_cfg != NULL) uct_config_release(if_cfg);
//     if (md != NULL) uct_md_close(md);
//     if (md_cfg != NULL) uct_config_release(md_cfg);
//     if (worker != NULL) uct_worker_destroy(worker);
//     if (async != NULL) ucs_async_context_destroy(async);
//     if (comps != NULL) uct_release_component_list(comps);
//     return ret;
// }
import "C"

import "fmt"

// GuardVersion returns velo_ucx_guard_version() of the linked UCX: "velo-ucx-guard/2" for a UCX
// built with the patch set.
func GuardVersion() string { return C.GoString(C.velo_ucx_guard_version()) }

// GuardCounters returns the patch set's refusal counters (velo_ucx_guard_counters).
func GuardCounters() GuardCounts {
	var c [5]C.uint64_t
	C.velo_guard_counters(&c[0])
	var out GuardCounts
	for i := range out {
		out[i] = uint64(c[i])
	}
	return out
}

func statusName(s C.int) string { return C.GoString(C.ucs_status_string(C.ucs_status_t(s))) }

// SoftwareRMAProbe connects two workers of this process over the configured transports (UCX_TLS,
// tcp when unset) and has one put, get and run atomics at a global of the process through the
// other's remote key, then send an active message of amBytes (none when 0). It reports what each
// operation returned, what the refused reads delivered, the global's value afterwards and how
// the counters moved.
func SoftwareRMAProbe(amBytes int) (RMAProbeReport, error) {
	var rep C.velo_guard_rma_report_t
	before := GuardCounters()
	if C.velo_guard_rma_probe(&rep, C.size_t(amBytes)) != 0 {
		return RMAProbeReport{}, fmt.Errorf("%w: %s", ErrUCX, C.GoString(rep.failed))
	}
	after := GuardCounters()
	return RMAProbeReport{
		Put: statusName(rep.put), PutFlush: statusName(rep.put_flush), Get: statusName(rep.get),
		AtomicPost: statusName(rep.amo_post), AtomicFlush: statusName(rep.amo_flush),
		AtomicFetch: statusName(rep.amo_fetch), AM: statusName(rep.am),
		GetDelivered: uint64(rep.get_buf), FetchDelivered: uint64(rep.amo_fetch_buf),
		Target: uint64(C.velo_guard_rma_target_value()), Counted: after.Sub(before),
	}, nil
}

// TCPPutProbe opens two tcp interfaces of this process on the loopback device and sends a tcp
// PUT of 8 bytes from one to a global of the process through the other; it returns once the
// receiver refused it and the sender saw its connection close.
func TCPPutProbe() (TCPProbeReport, error) {
	var rep C.velo_guard_tcp_report_t
	before := GuardCounters()
	if C.velo_guard_tcp_probe(&rep) != 0 {
		return TCPProbeReport{}, fmt.Errorf("%w: %s", ErrUCX, C.GoString(rep.failed))
	}
	after := GuardCounters()
	return TCPProbeReport{
		Put: statusName(rep.put), SenderErrors: int(rep.sender_errors),
		Target: uint64(C.velo_guard_tcp_target_value()), Counted: after.Sub(before),
	}, nil
}

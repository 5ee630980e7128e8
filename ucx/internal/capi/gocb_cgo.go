//go:build cgo && linux && ucx_cbbench

package capi

// #include <stdint.h>
// #include <ucp/api/ucp.h>
// ucs_status_t velo_ucx_set_am_handler_gocb(ucp_worker_h worker, unsigned id, uintptr_t arg);
import "C"

import (
	"sync"
	"unsafe"
)

// Measurement only (build tag ucx_cbbench): a cgo callback per received message.

var (
	gocbMu       sync.Mutex
	gocbHandlers = map[uintptr]func(header, data []byte){}
	gocbNext     uintptr
)

//export veloGoAMCallback
func veloGoAMCallback(arg C.uintptr_t, header unsafe.Pointer, hlen C.size_t, data unsafe.Pointer, dlen C.size_t) {
	gocbMu.Lock()
	fn := gocbHandlers[uintptr(arg)]
	gocbMu.Unlock()
	fn(CBytes(header, uintptr(hlen)), CBytes(data, uintptr(dlen)))
}

// UcpWorkerSetAmRecvHandlerGoCallback wraps ucp_worker_set_am_recv_handler with a handler
// that calls fn (through cgo) for every message (helper velo_ucx_set_am_handler_gocb).
func UcpWorkerSetAmRecvHandlerGoCallback(w Worker, id uint16, fn func(header, data []byte)) Status {
	gocbMu.Lock()
	gocbNext++
	key := gocbNext
	gocbHandlers[key] = fn
	gocbMu.Unlock()
	return Status(C.velo_ucx_set_am_handler_gocb(w.p, C.uint(id), C.uintptr_t(key)))
}

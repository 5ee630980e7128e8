//go:build cgo && linux && ucx_static

package ucxstatic

// The link: one archive that holds a single relocatable object made of every UCX library (see
// third_party/ucx/README.md, "Linking"), then the only shared libraries UCX may pull in.

// #cgo CFLAGS: -I${SRCDIR}/../../third_party/ucx/build/include
// #cgo LDFLAGS: ${SRCDIR}/../../third_party/ucx/build/lib/libvelo_ucx.a -libverbs -lmlx5 -lrdmacm -lpthread -ldl -lrt -lm
// #include <stdint.h>
// #include <stdlib.h>
// #include <string.h>
// #include <ucp/api/ucp.h>
// #include <uct/api/uct.h>
//
// // Global entries of the two mlx5 IB memory-domain implementations (ib_mlx5dv_md.c). Declared
// // opaque: only their addresses are needed, to recognise them in UCX's table.
// extern char uct_ib_md_ops_devx_entry[];
// extern char uct_ib_md_ops_dv_entry[];
// static uintptr_t velo_devx_entry(void) { return (uintptr_t)uct_ib_md_ops_devx_entry; }
// static uintptr_t velo_dv_entry(void) { return (uintptr_t)uct_ib_md_ops_dv_entry; }
//
// // Mirrors uct_ib_md_ops_entry_t of UCX 1.13 (src/uct/ib/base/ib_md.h, not installed): the name
// // UCX logs in "md open by '%s'", then the ops. uct_ib_ops is an array of pointers to them,
// // in the order uct_ib_md_open tries them. The caller proves the layout by finding the
// // entries above in the table it reads.
// typedef struct { const char *name; const void *ops; } velo_ib_md_ops_entry;
//
// static const char *velo_md_ops_at(uintptr_t table, int i, uintptr_t *entry) {
//     velo_ib_md_ops_entry *const *ops = (velo_ib_md_ops_entry *const *)table;
//     *entry = (uintptr_t)ops[i];
//     return ops[i] == NULL ? NULL : ops[i]->name;
// }
//
// // UCX 1.22: uct_ib_ops is a list head (ucs_list_link_t: prev, next) and each entry starts with
// // its list link, then the name and the ops; each module's constructor adds its entries at the
// // head, and uct_ib_md_open walks the list from head->next. Returns NULL past the last entry,
// // or after 16 (a list that does not close is not UCX's).
// typedef struct velo_list { struct velo_list *prev, *next; } velo_list;
// typedef struct { velo_list list; const char *name; const void *ops; } velo_ib_md_ops_entry_122;
//
// static const char *velo_md_ops_list_at(uintptr_t head, int i, uintptr_t *entry) {
//     velo_list *h = (velo_list *)head, *l = h->next;
//     for (int k = 0; k < i && l != h && k < 16; k++) l = l->next;
//     if (l == h || i >= 16) return NULL;
//     *entry = (uintptr_t)l;
//     return ((velo_ib_md_ops_entry_122 *)l)->name;
// }
//
// static ucs_status_t velo_component_name(uct_component_h c, char *name, size_t len) {
//     uct_component_attr_t attr = {.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME};
//     ucs_status_t s = uct_component_query(c, &attr);
//     if (s == UCS_OK) { strncpy(name, attr.name, len - 1); name[len - 1] = 0; }
//     return s;
// }
//
// // Opens every memory domain of component c and appends "tl/device" for each transport
// // resource to out (a ';'-separated list).
// static ucs_status_t velo_component_tl_resources(uct_component_h c, char *out, size_t len) {
//     uct_component_attr_t attr = {.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT};
//     ucs_status_t s = uct_component_query(c, &attr);
//     if (s != UCS_OK) return s;
//     if (attr.md_resource_count == 0) return UCS_OK;
//     uct_md_resource_desc_t *mds = calloc(attr.md_resource_count, sizeof(*mds));
//     if (mds == NULL) return UCS_ERR_NO_MEMORY;
//     attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
//     attr.md_resources = mds;
//     s = uct_component_query(c, &attr);
//     for (unsigned i = 0; s == UCS_OK && i < attr.md_resource_count; i++) {
//         uct_md_config_t *cfg;
//         uct_md_h md;
//         uct_tl_resource_desc_t *tls;
//         unsigned n;
//         s = uct_md_config_read(c, NULL, NULL, &cfg);
//         if (s != UCS_OK) break;
//         s = uct_md_open(c, mds[i].md_name, cfg, &md);
//         uct_config_release(cfg);
//         if (s != UCS_OK) break;
//         s = uct_md_query_tl_resources(md, &tls, &n);
//         for (unsigned j = 0; s == UCS_OK && j < n; j++) {
//             size_t used = strlen(out);
//             snprintf(out + used, len - used, "%s/%s;", tls[j].tl_name, tls[j].dev_name);
//         }
//         if (s == UCS_OK) uct_release_tl_resource_list(tls);
//         uct_md_close(md);
//     }
//     free(mds);
//     return s;
// }
//
// // ucp_init with AM and RMA, one worker, its packed address; everything is released again.
// static ucs_status_t velo_ucp_init(const char *tls, size_t *address_len, const char **failed) {
//     ucp_config_t *cfg;
//     ucp_context_h ctx;
//     ucp_worker_h worker;
//     ucp_address_t *addr;
//     ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES,
//                            .features = UCP_FEATURE_AM | UCP_FEATURE_RMA};
//     ucp_worker_params_t wparams = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
//                                    .thread_mode = UCS_THREAD_MODE_SINGLE};
//     ucs_status_t s = ucp_config_read(NULL, NULL, &cfg);
//     if (s != UCS_OK) { *failed = "ucp_config_read"; return s; }
//     if (tls != NULL) {
//         s = ucp_config_modify(cfg, "TLS", tls);
//         if (s != UCS_OK) { ucp_config_release(cfg); *failed = "ucp_config_modify(TLS)"; return s; }
//     }
//     s = ucp_init(&params, cfg, &ctx);
//     ucp_config_release(cfg);
//     if (s != UCS_OK) { *failed = "ucp_init"; return s; }
//     s = ucp_worker_create(ctx, &wparams, &worker);
//     if (s != UCS_OK) { ucp_cleanup(ctx); *failed = "ucp_worker_create"; return s; }
//     s = ucp_worker_get_address(worker, &addr, address_len);
//     if (s == UCS_OK) ucp_worker_release_address(worker, addr);
//     else *failed = "ucp_worker_get_address";
//     ucp_worker_destroy(worker);
//     ucp_cleanup(ctx);
//     return s;
// }
import "C"

import (
	"debug/elf"
	"fmt"
	"os"
	"strings"
	"unsafe"
)

func statusError(call string, s C.ucs_status_t) error {
	return fmt.Errorf("%w: %s: %s", ErrUCX, call, C.GoString(C.ucs_status_string(s)))
}

// Version returns the version string of the linked UCX (ucp_get_version_string).
func Version() string { return C.GoString(C.ucp_get_version_string()) }

// Components lists the UCT components in registration order (uct_query_components). Each one
// is registered by a constructor of its library, so a component missing here is a constructor
// that never ran.
func Components() ([]string, error) {
	var comps *C.uct_component_h
	var n C.unsigned
	if s := C.uct_query_components(&comps, &n); s != C.UCS_OK {
		return nil, statusError("uct_query_components", s)
	}
	defer C.uct_release_component_list(comps)
	var names []string
	for _, c := range unsafe.Slice(comps, int(n)) {
		var buf [C.UCT_COMPONENT_NAME_MAX]C.char
		if s := C.velo_component_name(c, &buf[0], C.size_t(len(buf))); s != C.UCS_OK {
			return nil, statusError("uct_component_query", s)
		}
		names = append(names, C.GoString(&buf[0]))
	}
	return names, nil
}

// TransportResources opens every memory domain of the named component and returns its transport
// resources as "tl/device" (uct_md_query_tl_resources): for "tcp", one per network interface.
func TransportResources(component string) ([]string, error) {
	var comps *C.uct_component_h
	var n C.unsigned
	if s := C.uct_query_components(&comps, &n); s != C.UCS_OK {
		return nil, statusError("uct_query_components", s)
	}
	defer C.uct_release_component_list(comps)
	for _, c := range unsafe.Slice(comps, int(n)) {
		var name [C.UCT_COMPONENT_NAME_MAX]C.char
		if s := C.velo_component_name(c, &name[0], C.size_t(len(name))); s != C.UCS_OK {
			return nil, statusError("uct_component_query", s)
		}
		if C.GoString(&name[0]) != component {
			continue
		}
		out := (*C.char)(C.calloc(1, 16384))
		defer C.free(unsafe.Pointer(out))
		if s := C.velo_component_tl_resources(c, out, 16384); s != C.UCS_OK {
			return nil, statusError("uct_md_query_tl_resources("+component+")", s)
		}
		return strings.FieldsFunc(C.GoString(out), func(r rune) bool { return r == ';' }), nil
	}
	return nil, fmt.Errorf("%w: component %q is not registered", ErrUCX, component)
}

// InitTCP runs ucp_init (AM and RMA features), creates a worker and packs its address. The
// transports are UCX_TLS when the environment sets it (the environment wins, as everywhere in
// velo) and "tcp" otherwise.
func InitTCP() (InitReport, error) {
	rep := InitReport{Version: Version(), TLS: os.Getenv("UCX_TLS")}
	var ctls *C.char
	if rep.TLS == "" {
		rep.TLS = "tcp"
		ctls = C.CString(rep.TLS)
		defer C.free(unsafe.Pointer(ctls))
	}
	var addrLen C.size_t
	var failed *C.char
	if s := C.velo_ucp_init(ctls, &addrLen, &failed); s != C.UCS_OK {
		return rep, statusError(C.GoString(failed), s)
	}
	rep.WorkerAddressBytes = int(addrLen)
	return rep, nil
}

// IBMDOpsOrder returns UCX's table of IB memory-domain implementations in the order in which
// uct_ib_md_open tries them for every device, read from this process's memory.
//
// The table (uct_ib_ops in ib_md.c) is file-local, so its address comes from the executable's
// own symbol table; the difference between the run-time and link-time addresses of a global
// entry gives the load bias. The layout is proven, not assumed: the two mlx5 entries, whose
// addresses C takes directly, must appear in the table that was read.
func IBMDOpsOrder() ([]MDOps, error) {
	exe, err := elf.Open("/proc/self/exe")
	if err != nil {
		return nil, fmt.Errorf("ucxstatic: reading the executable's symbol table: %w", err)
	}
	defer exe.Close()
	syms, err := exe.Symbols()
	if err != nil {
		return nil, fmt.Errorf("ucxstatic: reading the executable's symbol table (was it stripped?): %w", err)
	}
	var table, devx elf.Symbol
	for _, s := range syms {
		switch s.Name {
		case "uct_ib_ops":
			table = s
		case "uct_ib_md_ops_devx_entry":
			devx = s
		}
	}
	if table.Value == 0 || devx.Value == 0 {
		return nil, fmt.Errorf("ucxstatic: symbols uct_ib_ops / uct_ib_md_ops_devx_entry not in the executable; is it linked with the static UCX and unstripped?")
	}
	bias := uintptr(C.velo_devx_entry()) - uintptr(devx.Value)
	var out []MDOps
	var maj, min, rel C.uint
	C.ucp_get_version(&maj, &min, &rel)
	if maj == 1 && min < 14 {
		n := int(table.Size / uint64(unsafe.Sizeof(uintptr(0))))
		for i := 0; i < n; i++ {
			var entry C.uintptr_t
			name := C.velo_md_ops_at(C.uintptr_t(uintptr(table.Value)+bias), C.int(i), &entry)
			if name == nil {
				return nil, fmt.Errorf("ucxstatic: uct_ib_ops[%d] is empty", i)
			}
			out = append(out, MDOps{Name: C.GoString(name), Entry: uintptr(entry)})
		}
	} else {
		for i := 0; ; i++ {
			var entry C.uintptr_t
			name := C.velo_md_ops_list_at(C.uintptr_t(uintptr(table.Value)+bias), C.int(i), &entry)
			if name == nil {
				break
			}
			out = append(out, MDOps{Name: C.GoString(name), Entry: uintptr(entry)})
		}
	}
	seen := map[uintptr]bool{}
	for _, o := range out {
		seen[o.Entry] = true
	}
	if !seen[uintptr(C.velo_devx_entry())] || !seen[uintptr(C.velo_dv_entry())] {
		return nil, fmt.Errorf("ucxstatic: the table read at uct_ib_ops does not hold UCX's mlx5 entries; the entry layout differs from UCX 1.13's array and 1.22's list: %+v", out)
	}
	return out, nil
}

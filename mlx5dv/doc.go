// Package mlx5dv answers the mlx5 questions of a node preflight: is this device driven by mlx5,
// does a DEVX context open on it, and what mlx5-specific capabilities does it report.
//
// # Why DEVX matters
//
// UCX's accelerated InfiniBand transports (rc_mlx5, ud_mlx5, dc_mlx5) need the mlx5 memory domain,
// and that domain opens only through DEVX, mlx5's interface for sending firmware commands from user
// space. When DEVX does not open, UCX silently falls back to the plain verbs memory domain and the
// accelerated transports have no devices — the guide's "md open by uct_ib_verbs_md_ops on a mlx5
// NIC". DEVX needs three things, and when the context does not open [ProbeDEVX] says which one is
// missing:
//
//   - firmware that supports user contexts (UCTX),
//   - a kernel whose mlx5_ib supports DEVX (4.18 and later, built with user access; some older
//     kernels also demand CAP_NET_RAW),
//   - an rdma-core whose libmlx5 has mlx5dv_open_device (v22 and later) and is installed as the
//     provider for the device.
//
// # Answers
//
// The probes follow package verbs: nil means available, an error wrapping verbs.ErrNotSupported
// means definitely not (with the missing part named), anything else means the probe could not
// tell. [IsMLX5] reads sysfs and works without cgo; the rest call libmlx5 and, in a binary built
// with CGO_ENABLED=0, return an error wrapping verbs.ErrNotCompiled.
package mlx5dv

// Package verbs probes RDMA devices and ports through sysfs and wraps libibverbs.
package verbs

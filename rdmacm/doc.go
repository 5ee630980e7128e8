// Package rdmacm maps an IP address to the RDMA device and port that carry it.
package rdmacm

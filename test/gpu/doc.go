// Package gpu is velo's GPU suite: reads of CUDA device memory between two processes over UCX's
// CUDA transports, checked byte for byte against host copies. It runs only in a binary built with
// -tags cuda,ucx_static on a machine with an NVIDIA GPU and driver; everywhere else its tests skip
// with the reason. The binaries are built on the build machine (make test-gpu-bundle) and run on
// the GPU machine, which needs no network and no Go (make test-gpu, or the bundle's run.sh).
//
// Device memory is allocated here, in the test's own helper (cuda.go), through the CUDA driver
// API: the application's part. velo and the ucx module only take the pointers.
package gpu

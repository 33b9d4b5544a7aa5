// Package verbs is the RDMA transport's whole binding to rdma-core:
// libibverbs for memory, queues and work requests, librdmacm for
// connections. It is the only cgo in the module, and it builds only on
// Linux with cgo. The hot calls are batch-shaped, so one cgo crossing posts
// many work requests or polls many completions; the verbs that verbs.h
// defines static inline are reached through the trampolines of shim.c.
//
// Memory registered here gets local access rights only: the binding has no
// way to grant a peer remote read, write or atomic access, and no call
// exposes a remote key.
package verbs

// Package proto is ZooKeeper's client protocol as the coordination
// service speaks it: the constants and records of Apache ZooKeeper's jute
// wire format (operation codes, error codes, create modes, permissions,
// watch events, Stat and ACL), so that unmodified ZooKeeper clients talk
// to the service.
//
// The names follow ZooKeeper's own (ZooDefs.OpCode, KeeperException.Code,
// CreateMode, Watcher.Event), and every numeric value is the one those
// clients put on the wire.
package proto

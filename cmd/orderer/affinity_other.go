//go:build !linux

package main

// affinity says that this system does not tell the CPUs a process may
// run on.
func affinity() string { return "(affinity unknown on this system)" }

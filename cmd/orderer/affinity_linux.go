package main

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// affinity returns the CPUs this process may run on, as a set.
func affinity() string {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return "(affinity unknown)"
	}
	var cpus []int
	for i := range 1024 {
		if set.IsSet(i) {
			cpus = append(cpus, i)
		}
	}
	return fmt.Sprint(cpus)
}

// Command cgocalls makes -n calls from Go to C between two readings of a
// cost.Meter and prints the cgo calls the meter saw.
package main

// static int next(int x) { return x + 1; }
import "C"

import (
	"flag"
	"fmt"

	"github.com/rubin-go/rubin/internal/cost"
)

func main() {
	n := flag.Int("n", 1000, "calls to make")
	flag.Parse()
	m := cost.Open(cost.Config{})
	defer m.Close()
	start := m.Read()
	x := C.int(0)
	for range *n {
		x = C.next(x)
	}
	d := m.Read().Sub(start)
	if int(x) != *n {
		panic("the C function did not run")
	}
	fmt.Println(d.Cgo)
}

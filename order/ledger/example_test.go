package ledger_test

import (
	"fmt"
	"log"
	"os"

	"github.com/rubin-go/rubin/order/ledger"
)

func Example() {
	dir, err := os.MkdirTemp("", "ledger")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	l, err := ledger.Open(dir)
	if err != nil {
		log.Fatal(err)
	}
	for _, b := range []string{"genesis", "block one", "block two"} {
		if err := l.Append(l.Height(), []byte(b)); err != nil {
			log.Fatal(err)
		}
	}
	// Sync, then acknowledge: the three blocks now survive a crash.
	if err := l.Sync(); err != nil {
		log.Fatal(err)
	}
	l.Close()

	l, err = ledger.Open(dir)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	b, err := l.Block(1)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("height %d, block 1: %s\n", l.Height(), b)
	// Output: height 3, block 1: block one
}

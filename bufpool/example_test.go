package bufpool_test

import (
	"context"
	"fmt"

	"github.com/rubin-go/rubin/bufpool"
)

// A buffer with two owners (one message sent to two peers, say) goes back
// to the pool only when both have released it.
func ExampleBuffer_Retain() {
	pool, err := bufpool.New(bufpool.Config{BufferSize: 4096})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()

	b, err := pool.Get(context.Background())
	if err != nil {
		fmt.Println(err)
		return
	}
	b.Write([]byte("prepare v=1 n=42"))
	b.Retain() // a second owner
	fmt.Printf("%q, capacity %d\n", b.Bytes(), b.Cap())

	b.Release() // the first owner is done
	fmt.Println("in use after one release:", pool.Stats().InUse)
	b.Release() // the second too: back to the pool
	fmt.Println("in use after both:", pool.Stats().InUse)
	// Output:
	// "prepare v=1 n=42", capacity 4096
	// in use after one release: 1
	// in use after both: 0
}

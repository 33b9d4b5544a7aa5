package cli

import (
	"errors"
	"os"
	"runtime/pprof"
)

// Profiled calls run under a CPU profile written to path, which go tool
// pprof reads, or just calls run if path is empty.
func Profiled(path string, run func() error) error {
	if path == "" {
		return run()
	}
	f, err := os.Create(path)
	if err == nil {
		err = pprof.StartCPUProfile(f)
		if err == nil {
			err = run()
			pprof.StopCPUProfile()
		}
		err = errors.Join(err, f.Close())
	}
	return err
}

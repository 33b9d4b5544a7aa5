package cli

import (
	"errors"
	"os"
	"runtime/pprof"
	"runtime/trace"
	"slices"
)

// Profiled calls run under a CPU profile written to path, which go tool
// pprof reads, or just calls run if path is empty.
func Profiled(path string, run func() error) (err error) {
	stop, err := StartProfile(path, "")
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, stop()) }()
	return run()
}

// StartProfile starts a CPU profile written to cpu (for go tool pprof)
// and an execution trace written to exec (for go tool trace), each
// unless its path is empty; stop ends them and closes their files.
func StartProfile(cpu, exec string) (stop func() error, err error) {
	var stops []func() error
	stopAll := func() error {
		var errs []error
		for _, f := range slices.Backward(stops) {
			errs = append(errs, f())
		}
		return errors.Join(errs...)
	}
	for _, p := range []struct {
		path        string
		start       func(*os.File) error
		stopProfile func()
	}{
		{cpu, func(f *os.File) error { return pprof.StartCPUProfile(f) }, pprof.StopCPUProfile},
		{exec, func(f *os.File) error { return trace.Start(f) }, trace.Stop},
	} {
		if p.path == "" {
			continue
		}
		f, err := os.Create(p.path)
		if err == nil {
			if err = p.start(f); err != nil {
				f.Close()
			}
		}
		if err != nil {
			return nil, errors.Join(err, stopAll())
		}
		stops = append(stops, func() error {
			p.stopProfile()
			return f.Close()
		})
	}
	return stopAll, nil
}

package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// jepsenCheckTimeout bounds the linearizability check.
const jepsenCheckTimeout = time.Minute

// kvInput and kvOutput are a history operation as the model sees it.
type kvInput struct {
	put        bool
	key, value string
}

type kvOutput struct {
	value string
	found bool
}

// kvModel returns the store's sequential specification for puts and gets,
// partitioned by key: each key's operations are linearizable on their own
// or the history is not. A key's state is its value, "" while it has none
// (the test puts no empty values).
func kvModel() porcupine.Model {
	return porcupine.Model{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			byKey := map[string][]porcupine.Operation{}
			var keys []string
			for _, op := range history {
				k := op.Input.(kvInput).key
				if _, ok := byKey[k]; !ok {
					keys = append(keys, k)
				}
				byKey[k] = append(byKey[k], op)
			}
			parts := make([][]porcupine.Operation, 0, len(keys))
			for _, k := range keys {
				parts = append(parts, byKey[k])
			}
			return parts
		},
		Init: func() any { return "" },
		Step: func(state, input, output any) (bool, any) {
			in, out, v := input.(kvInput), output.(kvOutput), state.(string)
			if in.put {
				return true, in.value
			}
			if !out.found {
				return v == "", v
			}
			return out.value == v, v
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(kvInput), output.(kvOutput)
			switch {
			case in.put:
				return fmt.Sprintf("put(%s, %s)", in.key, in.value)
			case !out.found:
				return fmt.Sprintf("get(%s) -> none", in.key)
			default:
				return fmt.Sprintf("get(%s) -> %s", in.key, out.value)
			}
		},
		DescribeState: func(state any) string {
			if state.(string) == "" {
				return "none"
			}
			return state.(string)
		},
	}
}

// porcupineOps turns a history into porcupine's operations; a put whose
// outcome is unknown returns at the end of time.
func porcupineOps(hist []jepsenOp) []porcupine.Operation {
	ops := make([]porcupine.Operation, len(hist))
	for i, op := range hist {
		ret := op.Return
		if ret < 0 {
			ret = math.MaxInt64
		}
		ops[i] = porcupine.Operation{
			ClientId: op.Client,
			Input:    kvInput{put: op.Put, key: op.Key, value: op.Value},
			Call:     op.Call,
			Output:   kvOutput{value: op.Value, found: op.Found},
			Return:   ret,
		}
	}
	return ops
}

// linearizable checks hist and, if it is not linearizable (or the check
// timed out), writes porcupine's visualization of it to dir, or to a new
// directory that outlives the test if dir is "", and returns an error
// naming the file.
func linearizable(hist []jepsenOp, dir string) error {
	m := kvModel()
	res, info := porcupine.CheckOperationsVerbose(m, porcupineOps(hist), jepsenCheckTimeout)
	if res == porcupine.Ok {
		return nil
	}
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "bft-jepsen-"); err != nil {
			return fmt.Errorf("history of %d operations: %s (and no directory for its visualization: %v)", len(hist), res, err)
		}
	}
	path := filepath.Join(dir, "history.html")
	if err := porcupine.VisualizePath(m, info, path); err != nil {
		return fmt.Errorf("history of %d operations: %s (visualization failed: %v)", len(hist), res, err)
	}
	return fmt.Errorf("history of %d operations: %s; visualization in %s", len(hist), res, path)
}

// checkLinearizable fails the test unless hist is linearizable.
func checkLinearizable(t *testing.T, hist []jepsenOp) {
	t.Helper()
	if err := linearizable(hist, ""); err != nil {
		t.Error(err)
		return
	}
	t.Logf("linearizable: %d operations", len(hist))
}

// TestKVModel shows that the checker the Jepsen test relies on can fail:
// a get that misses a put which completed before it began is caught, and
// one that overlaps the put is not; a put of unknown outcome may or may
// not have happened.
func TestKVModel(t *testing.T) {
	put := func(client int, key, value string, call, ret int64) jepsenOp {
		return jepsenOp{Client: client, Put: true, Key: key, Value: value, Call: call, Return: ret}
	}
	get := func(client int, key, value string, call, ret int64) jepsenOp {
		return jepsenOp{Client: client, Key: key, Value: value, Found: value != "", Call: call, Return: ret}
	}
	for _, tc := range []struct {
		name string
		hist []jepsenOp
		ok   bool
	}{
		{"read after write", []jepsenOp{put(0, "a", "1", 0, 10), get(1, "a", "1", 20, 30)}, true},
		{"stale read", []jepsenOp{put(0, "a", "1", 0, 10), get(1, "a", "", 20, 30)}, false},
		{"concurrent read", []jepsenOp{put(0, "a", "1", 0, 40), get(1, "a", "", 20, 30)}, true},
		{"other key", []jepsenOp{put(0, "a", "1", 0, 10), get(1, "b", "", 20, 30)}, true},
		{"unknown put seen", []jepsenOp{put(0, "a", "1", 0, -1), get(1, "a", "1", 20, 30)}, true},
		{"unknown put not seen", []jepsenOp{put(0, "a", "1", 0, -1), get(1, "a", "", 20, 30)}, true},
		{"value flips back", []jepsenOp{
			put(0, "a", "1", 0, 10), put(0, "a", "2", 20, 30),
			get(1, "a", "2", 40, 50), get(1, "a", "1", 60, 70),
		}, false},
	} {
		err := linearizable(tc.hist, t.TempDir())
		if (err == nil) != tc.ok {
			t.Errorf("%s: linearizable: %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil {
			t.Logf("%s: %v", tc.name, err)
		}
	}
}

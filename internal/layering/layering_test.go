// Package layering holds the test that keeps the module's imports going
// down the layers drawn in docs/architecture.md.
package layering

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	pathpkg "path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/rubin-go/rubin"

// A layer is a set of packages and the layers directly beneath it. A
// package may import a package of the module only if that package's layer
// is beneath its own, directly or further down: never a layer above, never
// one beside it, and never a sibling in its own layer. Packages are named
// by their path in the module; "." is the root package.
type layer struct {
	name    string
	pkgs    []string
	beneath []string
}

// layers is the table docs/architecture.md draws, bottom up. Every package
// of the module is in exactly one layer.
var layers = []layer{
	// The NIO core: bufpool imports nothing of ours, channel imports
	// bufpool, selectionkey imports channel, selector imports both.
	{"buffers", []string{"bufpool"}, nil},
	{"channel contract", []string{"channel"}, []string{"buffers"}},
	{"selection keys", []string{"selectionkey"}, []string{"channel contract"}},
	{"selector", []string{"selector"}, []string{"selection keys"}},

	// Transports implement the core. TCP is built into the registry of
	// transports, which the net.Conn face opens; RDMA is opt-in and adds
	// itself to the registry when imported. No transport imports another.
	{"addresses", []string{"internal/addr"}, nil},
	{"tcp transport", []string{"transport/tcp"}, []string{"selector", "addresses"}},
	{"transport registry", []string{"internal/anytransport"}, []string{"tcp transport"}},
	{"verbs binding", []string{"transport/rdma/internal/verbs"}, nil},
	{"rdma transport", []string{"transport/rdma"}, []string{"transport registry", "verbs binding", "addresses"}},

	// The net.Conn face, and the metrics that read its stacks.
	{"net.Conn face", []string{"."}, []string{"transport registry"}},
	{"metrics", []string{"metrics"}, []string{"net.Conn face"}},

	// The BFT core knows nothing of networking; its links speak over
	// channels or net.Conns, and its driver runs it over the transports.
	{"quorum arithmetic", []string{"bft/internal/quorum"}, nil},
	{"bft core", []string{"bft"}, []string{"quorum arithmetic"}},
	{"bft wire", []string{"bft/wire"}, []string{"bft core"}},
	{"bft auth", []string{"bft/auth"}, []string{"bft wire"}},
	{"bft services", []string{"bft/kv", "bft/link", "bft/wal"}, []string{"bft core", "channel contract"}},
	{"bft driver", []string{"bft/node"}, []string{"bft auth", "bft services", "net.Conn face"}},

	// The coordination service: ZooKeeper's client protocol, and the tree
	// of znodes, sessions and watches a replica holds.
	{"zookeeper protocol", []string{"coord/proto"}, nil},
	{"coordination tree", []string{"coord/tree"}, []string{"zookeeper protocol"}},
	{"coordination service", []string{"coord"}, []string{"bft core", "coordination tree"}},
	{"coordination gateway", []string{"coord/gateway"}, []string{"coordination service", "bft driver"}},

	// The ordering service: Fabric's blocks and envelopes, the replicated
	// application, and the gRPC server of Fabric's orderer API.
	{"fabric blocks", []string{"order/block"}, nil},
	{"fabric envelopes", []string{"order/envelope"}, nil},
	{"block ledger", []string{"order/ledger"}, nil},
	{"ordering service", []string{"order"}, []string{"bft core", "fabric blocks", "fabric envelopes"}},
	{"ordering clients", []string{"order/client"}, []string{"ordering service"}},
	{"ordering server", []string{"order/server"}, []string{"ordering clients", "bft driver", "block ledger"}},
	// A Fabric client sharing no code with the orderer: the tests' and
	// the demo's.
	{"fabric test client", []string{"order/ordertest"}, nil},

	// What only tests import.
	{"test helpers", []string{"internal/leakcheck", "internal/netns", "internal/rdmatest", "internal/layering"}, nil},
	{"conformance suite", []string{"channel/channeltest"}, []string{"selector", "test helpers"}},
	{"simulated network", []string{"internal/simnet"}, []string{"bft auth"}},
	{"byzantine coordination", []string{"coord/coordtest"}, []string{"coordination service"}},
	{"process tests", []string{"internal/proctest"}, []string{"bft auth"}},

	// Programs on top.
	{"measuring", []string{"internal/stats", "internal/cost", "benchmarks/internal/benchkit"}, nil},
	{"command line", []string{"internal/cli"}, nil},
	{"commands", []string{"cmd/echo", "cmd/bft", "cmd/coord", "cmd/orderer", "benchmarks", "benchmarks/echobench", "benchmarks/rdmabench", "benchmarks/bftbench", "benchmarks/coordbench"},
		[]string{"metrics", "rdma transport", "bft driver", "bft services", "coordination gateway", "ordering server", "fabric test client", "measuring", "command line"}},
}

// A listed is one package of the module as go list reports it.
type listed struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	CgoFiles   []string
	Error      *struct{ Err string }
}

// rel is a package's path in the module, "." for the root package.
func rel(importPath string) string {
	if importPath == module {
		return "."
	}
	return strings.TrimPrefix(importPath, module+"/")
}

// goList returns the module's root directory and the packages go list
// finds for this system, and fails t for those go list finds broken. A
// broken package's files are still checked: an import cycle, say, has an
// upward import the table names.
func goList(t *testing.T) (root string, pkgs []string) {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Dir,GoFiles,CgoFiles,Error", module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, &stderr)
	}
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decoding go list's output: %v", err)
		}
		// A package none of whose files builds here is go list's error,
		// not this test's: it reads every file.
		if p.Error != nil && len(p.GoFiles)+len(p.CgoFiles) > 0 {
			t.Errorf("go list: %s: %s", p.ImportPath, p.Error.Err)
		}
		if p.ImportPath == module {
			root = p.Dir
		}
		pkgs = append(pkgs, rel(p.ImportPath))
	}
	if root == "" {
		t.Fatalf("go list did not list the root package:\n%s", out)
	}
	return root, pkgs
}

// walkModule returns the module's packages, each with its non-test Go
// files (relative to root), whatever their build constraints: go list
// leaves out a package none of whose files builds on this system, and a
// file built only on another system or without cgo is held to the same
// layers. It skips what the go command skips: testdata, directories whose
// names begin with . or _, and nested modules.
func walkModule(t *testing.T, root string) map[string][]string {
	t.Helper()
	pkgs := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path == root {
				return nil
			}
			if name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
			return nil
		}
		file, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		file = filepath.ToSlash(file)
		dir := pathpkg.Dir(file)
		if strings.HasSuffix(name, "_test.go") {
			if _, ok := pkgs[dir]; !ok {
				pkgs[dir] = nil // a package, even with tests alone
			}
			return nil
		}
		pkgs[dir] = append(pkgs[dir], file)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

// An edge is one import of a module package by a file of another.
type edge struct {
	from, to string // paths in the module
	file     string // the importing file, relative to the module's root
}

// moduleImports returns the imports of module packages by files, which
// are relative to root and belong to the package from.
func moduleImports(t *testing.T, root, from string, files []string) []edge {
	t.Helper()
	var edges []edge
	fset := token.NewFileSet()
	for _, file := range files {
		f, err := parser.ParseFile(fset, filepath.Join(root, filepath.FromSlash(file)), nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, spec := range f.Imports {
			imp, err := strconv.Unquote(spec.Path.Value)
			if err != nil {
				t.Fatal(err)
			}
			if imp == module || strings.HasPrefix(imp, module+"/") {
				edges = append(edges, edge{from: from, to: rel(imp), file: file})
			}
		}
	}
	return edges
}

// below returns, for every layer, the set of layers beneath it, directly
// or further down. It reports a table that names unknown layers or whose
// layers are beneath themselves.
func below(t *testing.T) map[string]map[string]bool {
	t.Helper()
	byName := map[string]layer{}
	for _, l := range layers {
		if _, dup := byName[l.name]; dup {
			t.Fatalf("layer %q is in the table twice", l.name)
		}
		byName[l.name] = l
	}
	all := map[string]map[string]bool{}
	for _, l := range layers {
		seen := map[string]bool{}
		var walk func(name string)
		walk = func(name string) {
			for _, b := range byName[name].beneath {
				if _, ok := byName[b]; !ok {
					t.Fatalf("layer %q is beneath %q, which is not in the table", b, name)
				}
				if !seen[b] {
					seen[b] = true
					walk(b)
				}
			}
		}
		walk(l.name)
		if seen[l.name] {
			t.Fatalf("layer %q is beneath itself", l.name)
		}
		all[l.name] = seen
	}
	return all
}

// TestLayers checks every import of a module package by a non-test file of
// another against the table of layers. Tests are clients of their package
// and may import what they exercise (a second transport, the conformance
// suite, the net.Conn face); the go command rejects the cycles that would
// matter.
func TestLayers(t *testing.T) {
	beneath := below(t)
	layerOf := map[string]string{}
	for _, l := range layers {
		for _, p := range l.pkgs {
			if other, dup := layerOf[p]; dup {
				t.Errorf("%s is in two layers: %q and %q", p, other, l.name)
			}
			layerOf[p] = l.name
		}
	}

	root, listed := goList(t)
	pkgs := walkModule(t, root)
	for _, p := range listed {
		if _, ok := pkgs[p]; !ok {
			t.Fatalf("go list finds %s, which the walk of %s missed", show(p), root)
		}
	}
	unclassified := false
	for _, p := range slices.Sorted(maps.Keys(pkgs)) {
		if _, ok := layerOf[p]; !ok {
			unclassified = true
			t.Errorf("%s is in no layer: add it to the table in this test and to docs/architecture.md", show(p))
		}
	}
	for p, l := range layerOf {
		if _, ok := pkgs[p]; !ok {
			t.Errorf("layer %q names %s, which is not a package of the module", l, show(p))
		}
	}
	if unclassified {
		t.FailNow()
	}

	checked := 0
	for _, p := range slices.Sorted(maps.Keys(pkgs)) {
		for _, e := range moduleImports(t, root, p, pkgs[p]) {
			checked++
			from, to := layerOf[e.from], layerOf[e.to]
			if to == "" {
				t.Errorf("%s: %s imports %s, which is not a package of the module", e.file, show(e.from), show(e.to))
				continue
			}
			if beneath[from][to] {
				continue
			}
			why := fmt.Sprintf("layer %q is not beneath layer %q", to, from)
			if from == to {
				why = fmt.Sprintf("both are in layer %q, and siblings do not import each other", from)
			}
			t.Errorf("%s: %s imports %s: %s; %q may import %s (docs/architecture.md)",
				e.file, show(e.from), show(e.to), why, from, names(beneath[from]))
		}
	}
	if checked == 0 {
		t.Fatal("no imports between the module's packages were found")
	}
}

// show names a package in a message: by its path in the module, and the
// root package by its import path.
func show(p string) string {
	if p == "." {
		return module
	}
	return p
}

// names lists a set of layer names in the table's order.
func names(set map[string]bool) string {
	var s []string
	for _, l := range layers {
		if set[l.name] {
			s = append(s, fmt.Sprintf("%q", l.name))
		}
	}
	if len(s) == 0 {
		return "nothing of the module"
	}
	return "only " + strings.Join(s, ", ")
}

package rubin_test

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// readmeImports are the packages README snippets may use without importing
// them, by the name they are used under.
var readmeImports = map[string]string{
	"context":      "context",
	"flag":         "flag",
	"http":         "net/http",
	"net":          "net",
	"time":         "time",
	"rubin":        "github.com/rubin-go/rubin",
	"tcp":          "github.com/rubin-go/rubin/transport/tcp",
	"selector":     "github.com/rubin-go/rubin/selector",
	"selectionkey": "github.com/rubin-go/rubin/selectionkey",
}

// readmeGlobals are the names README snippets may use without declaring
// them: what the surrounding program would have.
const readmeGlobals = `package main

import (
	"context"
	"net/http"

	"github.com/rubin-go/rubin"
)

var (
	ctx     context.Context
	addr    string
	request []byte
	handler http.Handler
	s       *rubin.Stack
)

func main() {}
`

// readmeBlock is one fenced go block of README.md: its first line's number
// and its lines.
type readmeBlock struct {
	line int
	text []string
}

func readmeBlocks(t *testing.T, readme string) []readmeBlock {
	t.Helper()
	var blocks []readmeBlock
	var cur *readmeBlock
	for i, l := range strings.Split(readme, "\n") {
		switch {
		case cur == nil && strings.TrimSpace(l) == "```go":
			cur = &readmeBlock{line: i + 2}
		case cur != nil && strings.TrimSpace(l) == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.text = append(cur.text, l)
		}
	}
	if cur != nil {
		t.Fatalf("README.md:%d: go block not closed", cur.line-1)
	}
	return blocks
}

var importLine = regexp.MustCompile(`^import\s+(_\s+)?"[^"]+"`)

// snippetFile makes a Go file of block: its import lines become the file's
// imports (plus those of readmeImports it uses), the rest the body of a
// function returning error. A line that is just "..." stands for code left
// out. Every variable the body declares with := is used once after its
// statement, so that a snippet that shows a call without using its result
// still compiles. Line directives point compile errors at README.md.
func snippetFile(t *testing.T, n int, b readmeBlock) string {
	t.Helper()
	var imports []string
	body := make([]string, len(b.text))
	for i, l := range b.text {
		switch {
		case importLine.MatchString(l):
			imports = append(imports, strings.TrimSpace(strings.TrimPrefix(l, "import")))
		case strings.TrimSpace(l) != "...":
			body[i] = l
		}
	}
	src := strings.Join(body, "\n")
	head := fmt.Sprintf("package main\n\nfunc snippet%d() error {\n", n)
	const tail = "\n\treturn nil\n}\n"
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "", head+src+tail, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("README.md:%d: %v", b.line, err)
	}

	// Import the packages of readmeImports the body uses, and use what the
	// body declares, at the end of its statement's line.
	type insert struct {
		off  int
		text string
	}
	var ins []insert
	useDefined := func(list []ast.Stmt) {
		for _, st := range list {
			as, ok := st.(*ast.AssignStmt)
			if !ok || as.Tok != token.DEFINE {
				continue
			}
			var use strings.Builder
			for _, e := range as.Lhs {
				if id, ok := e.(*ast.Ident); ok && id.Name != "_" {
					fmt.Fprintf(&use, "; _ = %s", id.Name)
				}
			}
			ins = append(ins, insert{fset.Position(as.End()).Offset - len(head), use.String()})
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BlockStmt:
			useDefined(n.List)
		case *ast.CaseClause:
			useDefined(n.Body)
		case *ast.SelectorExpr:
			if id, ok := n.X.(*ast.Ident); ok {
				if path, ok := readmeImports[id.Name]; ok && !slices.ContainsFunc(imports, func(s string) bool { return strings.Contains(s, `"`+path+`"`) }) {
					imports = append(imports, id.Name+` "`+path+`"`)
				}
			}
		}
		return true
	})
	slices.SortFunc(ins, func(a, b insert) int { return b.off - a.off })
	for _, in := range ins {
		src = src[:in.off] + in.text + src[in.off:]
	}
	if len(imports) > 0 {
		slices.Sort(imports)
		head = fmt.Sprintf("package main\n\nimport (\n\t%s\n)\n\nfunc snippet%d() error {\n", strings.Join(imports, "\n\t"), n)
	}
	return head + fmt.Sprintf("//line README.md:%d\n", b.line) + src + tail
}

// TestReadmeSnippetsCompile builds every go block of README.md, so that a
// snippet that no longer matches the API fails here. The blocks are files
// of one package that exists only in a build overlay, inside this module,
// so the build needs neither a copy of the module nor the network.
func TestReadmeSnippetsCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command: %v", err)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := readmeBlocks(t, string(readme))
	if len(blocks) == 0 {
		t.Fatal("README.md has no go blocks")
	}
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	// A directory that does not exist in the module: the overlay adds it.
	pkgDir := filepath.Join(root, "internal", "readmesnippets")
	if _, err := os.Stat(pkgDir); err == nil {
		t.Fatalf("%s exists; the overlay needs the name", pkgDir)
	}
	tmp := t.TempDir()
	overlay := map[string]string{}
	add := func(name, src string) {
		p := filepath.Join(tmp, name)
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		overlay[filepath.Join(pkgDir, name)] = p
	}
	add("main.go", readmeGlobals)
	for i, b := range blocks {
		add(fmt.Sprintf("snippet%d.go", i), snippetFile(t, i, b))
	}
	js, err := json.Marshal(map[string]any{"Replace": overlay})
	if err != nil {
		t.Fatal(err)
	}
	ov := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ov, js, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(goTool, "build", "-overlay", ov, "-o", os.DevNull, "./internal/readmesnippets")
	cmd.Env = append(os.Environ(), "GOPROXY=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("README.md go blocks do not compile: %v\n%s", err, out)
	}
}

// Command crosscheck type-checks packages for another GOOS/GOARCH (from
// the environment), from source, with everything they import: what the
// compiler's front end would refuse there (a Linux-only call without a
// build-tagged fallback, a field another system's struct lacks), at a
// fraction of a cross build's cost: no code generated, nothing linked, and
// the bodies of the functions of packages outside the module not checked.
// tests/cross.sh runs it in make test's build phase; `make build` and
// `make vet-cross` do the real builds and vet.
//
//	crosscheck [-tags TAGS] [-test] PACKAGE...
//
// -test checks the packages' tests too (as go vet would). Errors are
// printed as the compiler prints them; the exit status is 1 when any.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
)

// pkg is one package of `go list -deps -json`.
type pkg struct {
	ImportPath string
	Dir        string
	Name       string
	GoFiles    []string
	ImportMap  map[string]string
	Imports    []string
	Standard   bool
	Module     *struct {
		Path, GoVersion string
		Main            bool
	}
	Error *struct{ Err string }

	done  chan struct{}
	types *types.Package
	errs  []string
}

func main() {
	tags := flag.String("tags", "", "build tags, as go build's -tags")
	test := flag.Bool("test", false, "check the packages' tests too")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: crosscheck [-tags TAGS] [-test] PACKAGE...")
		os.Exit(2)
	}
	pkgs, err := list(*tags, *test, flag.Args())
	if err != nil {
		fmt.Fprintf(os.Stderr, "crosscheck: %v\n", err)
		os.Exit(2)
	}
	n := check(pkgs, os.Stdout)
	if n > 0 {
		fmt.Fprintf(os.Stderr, "crosscheck: %d errors for %s/%s\n", n, goenv("GOOS"), goenv("GOARCH"))
		os.Exit(1)
	}
}

// gocmd is the go command: $GO (as the Makefile passes it), else go.
func gocmd() string {
	if g := os.Getenv("GO"); g != "" {
		return g
	}
	return "go"
}

func goenv(name string) string {
	out, err := exec.Command(gocmd(), "env", name).Output()
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(out))
}

// list is `go list -deps` of the packages, in its order (dependencies first).
func list(tags string, test bool, args []string) ([]*pkg, error) {
	cmdArgs := []string{"list", "-e", "-deps", "-json=ImportPath,Dir,Name,GoFiles,ImportMap,Imports,Standard,Module,Error"}
	if tags != "" {
		cmdArgs = append(cmdArgs, "-tags", tags)
	}
	if test {
		cmdArgs = append(cmdArgs, "-test")
	}
	cmd := exec.Command(gocmd(), append(cmdArgs, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %v\n%s", err, stderr.Bytes())
	}
	var pkgs []*pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		p := &pkg{done: make(chan struct{})}
		if err := dec.Decode(p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list: %w", err)
		}
		// The generated test mains (p.test) are the go command's, not ours.
		if strings.HasSuffix(p.ImportPath, ".test") {
			continue
		}
		pkgs = append(pkgs, p)
	}
	return pkgs, nil
}

// check type-checks every package once its imports are, as many at once
// as there are CPUs, and prints the errors; it returns how many.
func check(pkgs []*pkg, w io.Writer) int {
	byPath := map[string]*pkg{}
	for _, p := range pkgs {
		byPath[p.ImportPath] = p
	}
	fset := token.NewFileSet()
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	sizes := types.SizesFor("gc", goenv("GOARCH"))
	var wg sync.WaitGroup
	for _, p := range pkgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(p.done)
			for _, imp := range p.Imports {
				if d := byPath[imp]; d != nil {
					<-d.done
				}
			}
			sem <- struct{}{}
			defer func() { <-sem }()
			p.check(fset, byPath, sizes)
		}()
	}
	wg.Wait()
	n := 0
	for _, p := range pkgs {
		for _, e := range p.errs {
			fmt.Fprintln(w, e)
			n++
		}
	}
	return n
}

func (p *pkg) check(fset *token.FileSet, byPath map[string]*pkg, sizes types.Sizes) {
	if p.Error != nil {
		p.errs = append(p.errs, fmt.Sprintf("%s: %s", p.ImportPath, p.Error.Err))
		return
	}
	if p.ImportPath == "unsafe" {
		p.types = types.Unsafe
		return
	}
	ours := p.Module != nil && p.Module.Main
	var files []*ast.File
	for _, f := range p.GoFiles {
		af, err := parser.ParseFile(fset, filepath.Join(p.Dir, f), nil, parser.SkipObjectResolution)
		if err != nil {
			p.errs = append(p.errs, err.Error())
			return
		}
		files = append(files, af)
	}
	conf := types.Config{
		Importer: importer{p, byPath},
		Sizes:    sizes,
		// Outside the module only the declarations count here: what ours
		// can use of them. Their bodies are their authors' (and an import
		// used only in a body then looks unused).
		IgnoreFuncBodies:         !ours,
		DisableUnusedImportCheck: !ours,
		Error: func(err error) {
			if len(p.errs) < 20 {
				p.errs = append(p.errs, err.Error())
			}
		},
	}
	if p.Module != nil && p.Module.GoVersion != "" {
		conf.GoVersion = "go" + p.Module.GoVersion
	}
	path := p.ImportPath
	if i := strings.Index(path, " ["); i >= 0 {
		path = path[:i] // a test variant: the package's own path
	}
	p.types, _ = conf.Check(path, fset, files, nil)
}

// importer finds an import of from among the packages checked already.
type importer struct {
	from   *pkg
	byPath map[string]*pkg
}

func (im importer) Import(path string) (*types.Package, error) {
	if m, ok := im.from.ImportMap[path]; ok {
		path = m
	}
	if path == "unsafe" {
		return types.Unsafe, nil
	}
	d := im.byPath[path]
	if d == nil || d.types == nil {
		return nil, fmt.Errorf("%s: not type-checked", path)
	}
	return d.types, nil
}

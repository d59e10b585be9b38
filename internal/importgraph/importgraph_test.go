package importgraph

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/lmlite/lmlite"

// pkg is what go list -json says of a package that the rules need.
type pkg struct {
	ImportPath string
	Imports    []string // direct, non-test
	Deps       []string // transitive, non-test
}

// listPackages runs go list -deps -json over the module's packages (tests left out:
// a test may import what its package must not).
func listPackages(t *testing.T) map[string]pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Imports,Deps", module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	pkgs := map[string]pkg{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs[p.ImportPath] = p
	}
	return pkgs
}

// rule forbids the packages from selects to depend, directly or not, on the
// packages forbidden selects.
type rule struct {
	name      string
	from      func(path string) bool
	forbidden func(dep string) bool
}

func exactly(paths ...string) func(string) bool {
	return func(p string) bool { return slices.Contains(paths, p) }
}

// tree is the package at path and the ones below it.
func tree(path string) func(string) bool {
	return func(p string) bool { return p == path || strings.HasPrefix(p, path+"/") }
}

func anyOf(fs ...func(string) bool) func(string) bool {
	return func(p string) bool {
		for _, f := range fs {
			if f(p) {
				return true
			}
		}
		return false
	}
}

// engineCore is the engine's tree but the worker command (engine/worker runs the
// child processes of the workers mode and reports to Redis through rediscli, whose
// client metrics are Prometheus collectors).
func engineCore(p string) bool {
	return tree(module+"/engine")(p) && !tree(module+"/engine/worker")(p)
}

var rules = []rule{
	{"configs imports neither the engine (nor any package of its tree) nor the gateway",
		exactly(module + "/configs"),
		anyOf(tree(module+"/engine"), tree(module+"/gateway"))},
	{"the engine imports no Prometheus and no HTTP",
		engineCore,
		anyOf(tree("github.com/prometheus"), exactly("net/http"), tree("github.com/valyala/fasthttp"))},
	{"the engine imports neither the gateway nor configs",
		tree(module + "/engine"),
		anyOf(tree(module+"/gateway"), exactly(module+"/configs"))},
	{"the workers mode's shared types (engine/workerapi) import nothing of the module",
		exactly(module + "/engine/workerapi"),
		tree(module)},
	{"the worker command does not import the engine (only the Block API's types, engine/api; cmd joins them)",
		tree(module + "/engine/worker"),
		exactly(module + "/engine")},
	{"the gateway does not import the worker command",
		tree(module + "/gateway"),
		tree(module + "/engine/worker")},
	{"the codec packages and the core's contract do not import the gateway",
		anyOf(tree(module+"/gateway/openai"), tree(module+"/gateway/anthropic"), tree(module+"/gateway/core")),
		exactly(module + "/gateway")},
	{"the gateway does not import configs",
		tree(module + "/gateway"),
		exactly(module + "/configs")},
	{"nothing below cmd knows the file format (configs)",
		func(p string) bool { return !tree(module+"/cmd")(p) && p != module+"/configs" },
		exactly(module + "/configs")},
	{"the ledger knows nothing of tenants, money or usage (its owner, tenancy, does)",
		exactly(module + "/ledger"),
		anyOf(exactly(module+"/tenancy"), exactly(module+"/money"), exactly(module+"/usage"), tree(module+"/gateway"))},
}

// TestImportGraph checks each rule against every package of the module and names
// the import path by which a forbidden package comes in.
func TestImportGraph(t *testing.T) {
	pkgs := listPackages(t)
	if _, ok := pkgs[module+"/engine"]; !ok {
		t.Fatalf("go list did not list %s/engine", module)
	}
	for _, r := range rules {
		t.Run(r.name, func(t *testing.T) {
			checked := 0
			for path, p := range pkgs {
				if !strings.HasPrefix(path, module) || !r.from(path) {
					continue
				}
				checked++
				if slices.ContainsFunc(p.Deps, r.forbidden) {
					t.Errorf("%s: %s", path, strings.Join(chain(pkgs, path, r.forbidden), " -> "))
				}
			}
			if checked == 0 {
				t.Fatal("the rule selected no package")
			}
		})
	}
}

// chain is the shortest import path from path to a package forbidden selects
// (breadth first over the direct imports).
func chain(pkgs map[string]pkg, path string, forbidden func(string) bool) []string {
	prev := map[string]string{path: ""}
	queue := []string{path}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p != path && forbidden(p) {
			var out []string
			for ; p != ""; p = prev[p] {
				out = append(out, p)
			}
			slices.Reverse(out)
			return out
		}
		for _, imp := range pkgs[p].Imports {
			if _, seen := prev[imp]; !seen {
				prev[imp] = p
				queue = append(queue, imp)
			}
		}
	}
	return nil
}

// upward lists each module package that depends, directly or not, on a package
// above it in the tree (engine/worker on engine, gateway/openai on gateway), with
// the import path by which it does: a package's parent may use it, not the reverse.
func upward(pkgs map[string]pkg) []string {
	var out []string
	for path, p := range pkgs {
		if !strings.HasPrefix(path, module) {
			continue
		}
		above := func(dep string) bool { return strings.HasPrefix(path, dep+"/") }
		if slices.ContainsFunc(p.Deps, above) {
			out = append(out, strings.Join(chain(pkgs, path, above), " -> "))
		}
	}
	slices.Sort(out)
	return out
}

// TestNoArrowUpward checks that no package of the module depends on one above it
// (Go refuses the cycles; this is the other half of "no cycles, no arrow upward").
func TestNoArrowUpward(t *testing.T) {
	for _, s := range upward(listPackages(t)) {
		t.Error(s)
	}
}

// TestUpwardFindsAnArrow checks upward on a made-up graph: engine/api importing
// engine and engine/worker reaching it through engine/api are reported, cmd/lmlite
// (which imports the others from beside them) is not.
func TestUpwardFindsAnArrow(t *testing.T) {
	m := module
	pkgs := map[string]pkg{
		m + "/engine":        {ImportPath: m + "/engine", Imports: []string{"strings"}, Deps: []string{"strings"}},
		m + "/engine/api":    {ImportPath: m + "/engine/api", Imports: []string{m + "/engine"}, Deps: []string{m + "/engine"}},
		m + "/engine/worker": {ImportPath: m + "/engine/worker", Imports: []string{m + "/engine/api"}, Deps: []string{m + "/engine", m + "/engine/api"}},
		m + "/cmd/lmlite":    {ImportPath: m + "/cmd/lmlite", Imports: []string{m + "/engine/worker"}, Deps: []string{m + "/engine", m + "/engine/api", m + "/engine/worker"}},
		"strings":            {ImportPath: "strings"},
	}
	got := upward(pkgs)
	want := []string{m + "/engine/api -> " + m + "/engine", m + "/engine/worker -> " + m + "/engine/api -> " + m + "/engine"}
	if !slices.Equal(got, want) {
		t.Errorf("upward = %q, want %q", got, want)
	}
}

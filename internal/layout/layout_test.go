// Package layout holds no code: its test keeps the import rules of
// docs/DESIGN.md's "Layout" section, read from the go command itself.
package layout

import (
	"bytes"
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/outboxkit/outbox/"

type pkg struct {
	Dir          string
	GoFiles      []string
	ImportPath   string
	Imports      []string
	TestImports  []string
	XTestImports []string
}

// rel is path relative to the module, or "" for a package outside it.
func rel(path string) string {
	if after, ok := strings.CutPrefix(path, module); ok {
		return after
	}
	return ""
}

func under(path, folder string) bool { return path == folder || strings.HasPrefix(path, folder+"/") }

// goList runs the go command in the module's root with the given arguments.
func goList(t *testing.T, args ...string) []byte {
	t.Helper()
	root, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(root)))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

func packages(t *testing.T) []pkg {
	t.Helper()
	out := goList(t, "-tags", "benchpeers", "-json=Dir,GoFiles,ImportPath,Imports,TestImports,XTestImports", "./...")
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 30 {
		t.Fatalf("go list found %d packages; the module has more", len(pkgs))
	}
	return pkgs
}

// rule is one line of the layout's import rules: for the packages it
// covers, which of the module's packages they may import.
type rule struct {
	name   string
	covers func(p string) bool
	// allowed says whether a package covered may import the module's
	// package imp; tests says whether the rule holds for test imports too.
	allowed func(p, imp string) bool
	tests   bool
}

var rules = []rule{
	{
		name:    "nothing imports cmd/ but the command's own tree",
		covers:  func(string) bool { return true },
		allowed: func(p, imp string) bool { return !under(imp, "cmd") || under(p, cmdOf(imp)) },
		tests:   true,
	},
	{
		name:    "providers import only providers (and the secret scrubber)",
		covers:  func(p string) bool { return under(p, "providers") },
		allowed: func(_, imp string) bool { return under(imp, "providers") || imp == "internal/scrub" },
	},
	{
		name:   "providers' tests know nothing of recording or running intents",
		covers: func(p string) bool { return under(p, "providers") },
		allowed: func(_, imp string) bool {
			return under(imp, "providers") || imp == "internal/testkit" || imp == "internal/scrub"
		},
		tests: true,
	},
	{
		name:    "recording never imports running",
		covers:  func(p string) bool { return under(p, "intents") },
		allowed: func(_, imp string) bool { return !under(imp, "dispatcher") },
	},
	{
		name:    "the admin door reads and acts through the operator's packages, never running",
		covers:  func(p string) bool { return under(p, "adminhttp") },
		allowed: func(_, imp string) bool { return !under(imp, "dispatcher") },
	},
	{
		name:    "the store imports only the shared row types",
		covers:  func(p string) bool { return p == "internal/intentstore" },
		allowed: func(_, imp string) bool { return imp == "intents/intenttype" },
	},
	{
		name: "leaves import nothing of the module",
		covers: func(p string) bool {
			return slices.Contains([]string{"intents/intenttype", "migrations", "internal/testkit", "internal/testkit/pgadmin", "internal/testkit/pgbouncer", "internal/testkit/pgcluster", "internal/scrub", "internal/bytecheck", "internal/tracing", "internal/termtext"}, p)
		},
		allowed: func(string, string) bool { return false },
	},
	{
		name:    "the example service imports only public packages",
		covers:  func(p string) bool { return p == "cmd/notes" },
		allowed: func(_, imp string) bool { return !under(imp, "internal") && !strings.Contains(imp, "/internal/") },
	},
}

// cmdOf is the command folder ("cmd/outboxd") a cmd/ package belongs to.
func cmdOf(p string) string {
	parts := strings.SplitN(p, "/", 3)
	if len(parts) < 2 {
		return p
	}
	return parts[0] + "/" + parts[1]
}

func TestImportsFollowTheLayout(t *testing.T) {
	t.Parallel()
	for _, p := range packages(t) {
		from := rel(p.ImportPath)
		for _, r := range rules {
			if !r.covers(from) {
				continue
			}
			imports := p.Imports
			if r.tests {
				imports = slices.Concat(p.Imports, p.TestImports, p.XTestImports)
			}
			for _, imp := range imports {
				to := rel(imp)
				if to == "" || to == from {
					continue
				}
				if !r.allowed(from, to) {
					t.Errorf("%s imports %s: %s", from, to, r.name)
				}
			}
		}
	}
}

// The store's only outside dependencies are Postgres's driver, River and
// go-retry: it decides the state machine and nothing else.
func TestTheStoreDependsOnlyOnPgxAndRiver(t *testing.T) {
	t.Parallel()
	for _, p := range packages(t) {
		if rel(p.ImportPath) != "internal/intentstore" {
			continue
		}
		for _, imp := range p.Imports {
			first := strings.SplitN(imp, "/", 2)[0]
			if !strings.Contains(first, ".") || rel(imp) != "" {
				continue // the standard library, or the module
			}
			if !strings.HasPrefix(imp, "github.com/jackc/pgx/v5") && !strings.HasPrefix(imp, "github.com/riverqueue/river") && imp != "github.com/sethvargo/go-retry" {
				t.Errorf("internal/intentstore imports %s", imp)
			}
		}
		return
	}
	t.Fatal("internal/intentstore not found")
}

// The outboxd a user installs links no benchmark peer: they come in only
// with -tags benchpeers.
func TestOutboxdLinksNoBenchmarkPeer(t *testing.T) {
	t.Parallel()
	deps := strings.Fields(string(goList(t, "-deps", "./cmd/outboxd")))
	if !slices.Contains(deps, "github.com/riverqueue/river") {
		t.Fatalf("go list -deps ./cmd/outboxd does not list River; the listing is wrong:\n%s", strings.Join(deps, "\n"))
	}
	for _, d := range deps {
		if strings.Contains(d, "watermill") || strings.Contains(d, "dbos-inc") {
			t.Errorf("outboxd links %s", d)
		}
	}
}

// A public package defines what it exports, or aliases the public leaf: an
// exported alias, constant or variable taken from an internal package would
// send godoc readers somewhere they cannot import (River's rivertype
// defines; river aliases).
func TestPublicPackagesExportNothingFromInternal(t *testing.T) {
	t.Parallel()
	for _, p := range packages(t) {
		from := rel(p.ImportPath)
		if from == "" || under(from, "cmd") || under(from, "internal") || strings.Contains(from, "/internal") {
			continue
		}
		for _, name := range p.GoFiles {
			path := filepath.Join(p.Dir, name)
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			internal := map[string]bool{}
			for _, imp := range f.Imports {
				ip, _ := strconv.Unquote(imp.Path.Value)
				if !strings.Contains(ip, "/internal/") {
					continue
				}
				local := ip[strings.LastIndex(ip, "/")+1:]
				if imp.Name != nil {
					local = imp.Name.Name
				}
				internal[local] = true
			}
			fromInternal := func(e ast.Expr) bool {
				sel, ok := e.(*ast.SelectorExpr)
				if !ok {
					return false
				}
				id, ok := sel.X.(*ast.Ident)
				return ok && internal[id.Name]
			}
			for _, decl := range f.Decls {
				gen, ok := decl.(*ast.GenDecl)
				if !ok {
					continue
				}
				for _, spec := range gen.Specs {
					switch spec := spec.(type) {
					case *ast.TypeSpec:
						if spec.Name.IsExported() && spec.Assign.IsValid() && fromInternal(spec.Type) {
							t.Errorf("%s: type %s aliases an internal type", path, spec.Name.Name)
						}
					case *ast.ValueSpec:
						for i, n := range spec.Names {
							if n.IsExported() && i < len(spec.Values) && fromInternal(spec.Values[i]) {
								t.Errorf("%s: %s is taken from an internal package", path, n.Name)
							}
						}
					}
				}
			}
		}
	}
}
